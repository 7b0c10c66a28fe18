"""The compiler's operators, one module per operator or small family; each declares its
operators in ``compiler.registry`` (attributes, TFLite and ONNX import, float reference,
quantization rule, int8 parameters, lowering to chip descriptors, TFLite export).
Every module here is loaded when the registry is first consulted."""
