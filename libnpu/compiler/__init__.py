"""The model compiler: graph IR, importers (TFLite, ONNX), float reference, int8 quantizer."""
