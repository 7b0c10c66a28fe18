"""What tests share, in one place (imported as ``tests.support.<module>``; no sys.path hacks):

    device          a real device under a temporary devroot (start_npu, stop_npu, MountedNpu), waits
    shell           bash scripts as root or another uid (sh), the node's holder process, attr_dir
    npu_frame       the tiny frame writer those scripts call
    litert          golden outputs from LiteRT's reference kernels
    tflite_builder  single-operator .tflite models built in memory
    model_builders  small compiled models (IR graphs, .tflite files) for compiler and runtime tests
    quant_utils     random int8 tensors and quantization parameters
    chip_memory     a chip's DMA memory without a device, for kernel tests
    int8_walk, blazeface, reference   model walkers and reference implementations
    import_graph    the product's import graph (ast) and its circles, for tests/test_layers.py
"""
