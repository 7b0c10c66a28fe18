"""The compiler's operator registry: one declaration per operator, every stage reads it,
and an operator lives in few source files."""
from __future__ import annotations

from pathlib import Path

import tflite

from libnpu.compiler import registry
from npu_hw import ops as spec_ops  # noqa: F401 (registers the descriptors)
from npu_hw import tasks

REPO = Path(__file__).resolve().parents[3]


def test_every_operator_is_declared_once_with_its_stages() -> None:
    operators = registry.operators()
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "MAX_POOL_2D", "AVERAGE_POOL_2D",
            "SOFTMAX", "RESHAPE", "STRIDED_SLICE"} <= set(operators)
    for name, op in operators.items():
        assert op.name == name
        if not op.graph_op:        # resolved at import (resource variables): never an IR op
            assert op.tflite is not None and op.float_ref is None and op.export is None and not op.attrs, name
            continue
        if op.float_ref is None:  # an import rule: imported as other operators, or folded
            assert op.tflite is not None and op.params is None and op.export is None, name
            continue
        has_builtin = hasattr(tflite.BuiltinOperator, name)   # REDUCE_L2 (ONNX ReduceL2) has none
        assert (op.tflite is not None) == has_builtin, name
        # an export for every builtin; REDUCE_L2 writes SQRT(SUM(x * x)), CLIP MINIMUM(MAXIMUM(..)),
        # INSTANCE_NORM its centred spelling (float host calls, cpu_float)
        assert (op.export is not None) == (has_builtin or name in ("REDUCE_L2", "CLIP", "INSTANCE_NORM")), name
        assert (op.params is None) == (op.lower is None), name
        assert not (op.same_scale and op.fixed_output), name


def test_activations_and_math_live_in_at_most_four_source_files() -> None:
    """Four places at most: the registry's declaration, the import/lowering, the numpy
    kernel and the chip's unit. The C reruns under firmware_sim/kernels/native are not
    counted: each is checked byte for byte against its numpy kernel, the rule's one place."""
    for name in ("PRELU", "HARD_SWISH", "LEAKY_RELU", "SQUARED_DIFFERENCE", "RSQRT", "L2_NORMALIZATION",
                 "HARD_SIGMOID", "SOFTPLUS", "GELU", "LOG_SOFTMAX"):
        files = _source_files_naming(name)
        assert len(files) <= 4, (name, files)


def test_tflite_aliases_import_as_their_operator() -> None:
    assert registry.tflite_operator("SQUEEZE").name == "RESHAPE"
    assert registry.tflite_operator("PADV2").name == "PAD"
    assert registry.tflite_operator("MAX_POOL_2D").name == "MAX_POOL_2D"
    assert registry.tflite_operator("NO_SUCH_OP") is None


def test_onnx_nodes_have_handlers() -> None:
    for node in ("Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu",
                 "Clip", "Softmax", "Resize", "BatchNormalization", "Div", "Pad", "Concat"):
        assert registry.onnx_handler(node) is not None, node
    assert registry.onnx_handler("NoSuchOp") is None


def test_one_name_across_the_ir_and_the_chip() -> None:
    """Where an IR operator has a descriptor of its own, both carry the TFLite name."""
    for name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "MAX_POOL_2D", "AVERAGE_POOL_2D",
                 "MEAN", "SOFTMAX", "CONCATENATION", "RESHAPE", "TRANSPOSE", "PAD", "STRIDED_SLICE",
                 "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "ADD", "MUL", "QUANTIZE", "DEQUANTIZE"):
        assert registry.find(name) is not None and name in tasks.TASK_BY_NAME, name


def _source_files_naming(word: str) -> list[str]:
    """What ``grep -ril WORD kmd_fuse firmware_sim libnpu | grep -v tests`` lists."""
    found = []
    for top in ("kmd_fuse", "firmware_sim", "libnpu"):
        for path in (REPO / top).rglob("*"):
            rel = str(path.relative_to(REPO))
            if not path.is_file() or "tests" in rel or "__pycache__" in rel or path.suffix in (".so", ".pyc") \
                    or rel.startswith("firmware_sim/kernels/native/"):
                continue
            try:
                if word.lower() in path.read_text(errors="ignore").lower():
                    found.append(rel)
            except OSError:
                continue
    return sorted(found)


def test_a_self_contained_operator_lives_in_at_most_four_source_files() -> None:
    """The chip's descriptor (spec), its unit (handler + cost), the compiler's operator module,
    and at most a kernel: pooling was in 9 files before the registries."""
    for name in ("MAX_POOL_2D", "AVERAGE_POOL_2D", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "REDUCE_MAX",
                 "REDUCE_MIN", "REDUCE_L2", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "DENSIFY", "SPLIT_V", "BATCH_MATMUL",
                 "TRANSPOSE_CONV", "ARG_MAX", "ARG_MIN"):
        files = _source_files_naming(name)
        assert len(files) <= 4, (name, files)
