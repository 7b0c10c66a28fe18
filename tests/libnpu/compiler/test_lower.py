"""Model file -> loadable -> the chip's real executor (DMA engine, IOMMU, handlers):
outputs byte-identical to LiteRT's reference kernels."""
import numpy as np
import pytest

from libnpu.compiler.frontend import NotInt8Error
from libnpu.compiler.lower import compile_model, lower
from libnpu.compiler.onnx_import import import_onnx
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_export import export_tflite
from libnpu.compiler.tflite_import import load_tflite
from libnpu.loadable import Loadable, RegionKind
from npu_hw import tasks as spec_tasks
from tests.support import chip_memory
from tests.support import model_builders as builders


def run_on_chip(ld: Loadable, feeds: list[np.ndarray], tmp_path) -> list[np.ndarray]:
    """What the runtime will do, on fresh chip memory: allocate regions, copy weights, bind I/O, submit."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return chip_memory.run_loadable(chip_memory.ChipMemory(tmp_path, size=32 << 20), ld, feeds)


def test_resnet8_on_the_chip(resnet8_path, litert, tmp_path):
    ld = Loadable.from_bytes(compile_model(resnet8_path).to_bytes())
    assert [t.op for t in ld.tasks] == ["CONV_2D"] * 3 + ["ADD"] + ["CONV_2D"] * 3 + ["ADD"] + \
        ["CONV_2D"] * 3 + ["ADD", "AVERAGE_POOL_2D", "FULLY_CONNECTED", "SOFTMAX"]  # RESHAPE aliased away
    assert sum(t.macs for t in ld.tasks) == 12_501_632
    assert all(d < i for i, t in enumerate(ld.tasks) for d in t.deps) and ld.tasks[3].deps
    rng = np.random.default_rng(21)
    for k in range(2):
        x = rng.integers(-128, 128, (1, 32, 32, 3), dtype=np.int8)
        (got,) = run_on_chip(ld, [x], tmp_path / str(k))
        np.testing.assert_array_equal(got, litert(resnet8_path, [x])[0])


@pytest.mark.parametrize("make,shape", [(builders.small_cnn, (1, 3, 16, 16)), (builders.layout_mix, (1, 4, 8, 8)),
                                        (builders.standalone_activations, (1, 2, 4, 4))])
def test_quantized_onnx_on_the_chip(make, shape, litert, tmp_path):
    rng = np.random.default_rng(22)
    q = quantize_model(import_onnx(make()), [[rng.standard_normal(shape).astype(np.float32)] for _ in range(4)])
    ld = lower(q)
    x = rng.standard_normal(shape).astype(np.float32)
    for got, ref in zip(run_on_chip(ld, [x], tmp_path), litert(export_tflite(q), [x]), strict=True):
        np.testing.assert_array_equal(got, ref)


def test_blazeface_on_the_chip(blazeface_path, astronaut, litert, tmp_path):
    img = astronaut.astype(np.float32) / 127.5 - 1.0
    cal = [img[y:y + 256:2, x:x + 256:2][None].copy() for y, x in ((0, 64), (128, 128), (256, 0))]
    q = quantize_model(load_tflite(blazeface_path), [[c] for c in cal])
    ld = lower(q)
    kinds = [r.kind for r in ld.regions]
    assert kinds.count(RegionKind.OUTPUT) == 2 and kinds.count(RegionKind.INPUT) == 1
    assert sum(t.op == "CONCATENATION" for t in ld.tasks) == 2
    face = img[0:384:3, 64:448:3][None].copy()
    for got, ref in zip(run_on_chip(ld, [face], tmp_path), litert(export_tflite(q), [face]), strict=True):
        np.testing.assert_array_equal(got, ref)


def test_descriptors_decode_and_float_graph_is_refused(resnet8_path, blazeface_path):
    ld = lower(load_tflite(resnet8_path))
    cmd = ld.command_buffer([0x1000_0000 * (i + 1) for i in range(len(ld.regions))])
    decoded = list(spec_tasks.decode_tasks(cmd))
    assert [t.name for _, t, _ in decoded][:2] == ["CONV_2D", "CONV_2D"]
    assert len(decoded) == len(ld.tasks)
    with pytest.raises(NotInt8Error, match="float32"):
        lower(load_tflite(blazeface_path))


def _random_topological_order(ld: Loadable, rng) -> list[int]:
    pending = {i: set(t.deps) for i, t in enumerate(ld.tasks)}
    order: list[int] = []
    while pending:
        ready = sorted(i for i, d in pending.items() if not d)
        pick = int(rng.choice(ready))
        order.append(pick)
        del pending[pick]
        for d in pending.values():
            d.discard(pick)
    return order


def test_dependencies_cover_every_hazard(blazeface_path, tmp_path):
    """Any order that respects the task dependencies computes the same bytes, although
    the activation arena reuses memory heavily."""
    import dataclasses
    q = quantize_model(load_tflite(blazeface_path), random_count=1)
    ld = lower(q)
    x = np.random.default_rng(23).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    expected = run_on_chip(ld, [x], tmp_path / "in-order")
    rng = np.random.default_rng(24)
    reordered_any = False
    for k in range(3):
        order = _random_topological_order(ld, rng)
        reordered_any |= order != sorted(order)
        where = {old: new for new, old in enumerate(order)}
        tasks = [dataclasses.replace(ld.tasks[i], deps=sorted(where[d] for d in ld.tasks[i].deps)) for i in order]
        shuffled = dataclasses.replace(ld, tasks=tasks)
        for got, ref in zip(run_on_chip(shuffled, [x], tmp_path / f"order{k}"), expected, strict=True):
            np.testing.assert_array_equal(got, ref)
    assert reordered_any


def test_a_task_names_no_dependency_another_one_implies():
    """Every earlier task touching bytes a task overwrites must end before it, but most are
    reached through another of them: naming them all made an unrolled GRU's task graph
    quadratic (wakeforge-wake-up: 7,224 tasks, 2.9 M dependencies, a 17 MB command buffer the
    chip decoded in Python past the 5 s job timeout). Failed before: this GRU's 636 tasks
    named 10,393 (up to 95 each); the hazards themselves: the test above."""
    from tests.support.rnn_models import rnn_model
    ld = compile_model(rnn_model("GRU", steps=40, hidden=16, outputs=("Y",)).SerializeToString(), recipe="fast")
    ancestors: list[set[int]] = []
    for index, task in enumerate(ld.tasks):
        through = [ancestors[d] for d in task.deps]
        assert all(d < index and not any(d in a for a in through) for d in task.deps)
        ancestors.append(set(task.deps).union(*through))
    assert sum(len(t.deps) for t in ld.tasks) < 2 * len(ld.tasks)


def test_rank_beyond_the_chip_is_refused():
    from libnpu.compiler.ir import Graph, Op, QuantParams, Tensor
    from libnpu.compiler.lower import LoweringError
    g = Graph("rank7")
    q = QuantParams(0.1, 0)
    g.add_tensor(Tensor("x", (1,) * 6 + (2,), "int8", q))
    g.add_tensor(Tensor("y", (2,) + (1,) * 6, "int8", q))
    g.add_op(Op("TRANSPOSE", ["x"], ["y"], {"perm": (6, 0, 1, 2, 3, 4, 5)}))
    g.inputs, g.outputs = ["x"], ["y"]
    with pytest.raises(LoweringError, match="rank 7 exceeds the chip's 6"):
        lower(g)


@pytest.mark.parametrize("which,shape,ops", [
    ("kws", (1, 50, 10, 1), {"QUANTIZE": 1, "CONV_2D": 5, "DEPTHWISE_CONV_2D": 4, "AVERAGE_POOL_2D": 1,
                             "RESHAPE": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1, "DEQUANTIZE": 1}),
    ("vww", (1, 96, 96, 3), {"QUANTIZE": 1, "CONV_2D": 14, "DEPTHWISE_CONV_2D": 13, "AVERAGE_POOL_2D": 1,
                             "RESHAPE": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1, "DEQUANTIZE": 1}),
    # its output reshape takes a shape computed by SHAPE -> STRIDED_SLICE -> PACK, folded at import
    ("anomaly", (1, 5, 128, 1), {"QUANTIZE": 1, "RESHAPE": 2, "FULLY_CONNECTED": 10, "DEQUANTIZE": 1})])
def test_mlperf_tiny_int8_models_on_the_chip(which, shape, ops, request, litert, tmp_path):
    """DS-CNN keyword spotting, MobileNet visual wake words, FC autoencoder: int8 inside, float I/O."""
    path = request.getfixturevalue(f"{which}_path")
    g = load_tflite(path)
    assert g.op_counts() == ops and g.tensors[g.inputs[0]].shape == shape
    ld = compile_model(path)  # int8 already: taken as is
    x = np.random.default_rng(25).uniform(-1, 1, shape).astype(np.float32)
    (got,) = run_on_chip(ld, [x], tmp_path)
    np.testing.assert_array_equal(got, litert(path, [x])[0])
