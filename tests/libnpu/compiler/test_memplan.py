import numpy as np
import pytest

from libnpu.compiler.memplan import ACTIVATIONS, WEIGHTS, plan_memory
from libnpu.compiler.quantizer import quantize_model
from libnpu.compiler.tflite_import import load_tflite
from libnpu.loadable import Loadable, RegionKind, Task, TensorFlags
from npu_hw import tasks as spec_tasks


def _check_no_conflicts(g, plan):
    arena = [(n, plan.placements[n], plan.lifetimes[n]) for n in g.tensors
             if plan.placements[n].region == ACTIVATIONS]
    for i, (a, pa, la) in enumerate(arena):
        assert pa.offset % plan.alignment == 0
        assert pa.offset + pa.nbytes <= plan.arena_size
        for b, pb, lb in arena[i + 1:]:
            if plan.aliases.get(a, a) == plan.aliases.get(b, b):
                continue
            live_together = la[0] <= lb[1] and lb[0] <= la[1]
            overlap = pa.offset < pb.offset + pb.nbytes and pb.offset < pa.offset + pa.nbytes
            assert not (live_together and overlap), (a, b)


def _peak_live(g, plan):
    """Lower bound: the most bytes live at any op."""
    peak = 0
    for idx in range(len(g.ops)):
        peak = max(peak, sum(g.tensors[n].nbytes for n, (s, e) in plan.lifetimes.items()
                             if plan.placements[n].region == ACTIVATIONS and s <= idx <= e
                             and plan.aliases.get(n, n) == n))
    return peak


def test_resnet8_plan(resnet8_path):
    g = load_tflite(resnet8_path)
    plan = plan_memory(g)
    _check_no_conflicts(g, plan)
    arena_tensors = [n for n in g.tensors if plan.placements[n].region == ACTIVATIONS]
    total = sum(g.tensors[n].nbytes for n in arena_tensors)
    assert _peak_live(g, plan) <= plan.arena_size < total  # reuse happened
    assert plan.arena_size <= 1.5 * _peak_live(g, plan)
    # every constant's bytes are in the weights region where the plan says
    content = plan.regions[WEIGHTS].content
    for t in g.constants():
        p = plan.placements[t.name]
        assert p.region == WEIGHTS and p.offset % 64 == 0
        assert content[p.offset:p.offset + p.nbytes] == t.data.tobytes()
    kinds = [r.kind for r in plan.regions]
    assert kinds == [RegionKind.WEIGHTS, RegionKind.ACTIVATIONS, RegionKind.INPUT, RegionKind.OUTPUT]
    # the flatten RESHAPE aliases its input: no copy needed
    reshape = next(op for op in g.ops if op.type == "RESHAPE")
    assert plan.placements[reshape.outputs[0]] == plan.placements[reshape.inputs[0]]


def test_blazeface_int8_plan(blazeface_path):
    q = quantize_model(load_tflite(blazeface_path), random_count=1, io_dtype="int8")
    plan = plan_memory(q)
    _check_no_conflicts(q, plan)
    assert plan.arena_size <= 1.5 * _peak_live(q, plan)
    assert len([r for r in plan.regions if r.kind == RegionKind.OUTPUT]) == 2


def test_plan_to_loadable_with_a_real_fc_descriptor(resnet8_path, tmp_path):
    """Lower the FULLY_CONNECTED op by hand into the chip's descriptor and round-trip it."""
    g = load_tflite(resnet8_path)
    plan = plan_memory(g)
    _, index = plan.descriptors(g)
    fc = next(op for op in g.ops if op.type == "FULLY_CONNECTED")
    x, w, b = (g.tensors[n] for n in fc.inputs)
    out = g.tensors[fc.outputs[0]]
    mult = plan.add_constant("fc/multipliers", np.arange(10, dtype=np.int32))
    assert mult.region == WEIGHTS and mult.offset % 64 == 0
    payload = spec_tasks.encode_task("FULLY_CONNECTED", rows=1, in_features=x.shape[-1],
                                     out_features=w.shape[0], input_zp=int(x.quant.zero_point[0]),
                                     output_zp=int(out.quant.zero_point[0]))
    dt = spec_tasks.FULLY_CONNECTED.dtype
    relocs = [plan.reloc(n, dt.fields[f][1]) for n, f in
              ((fc.inputs[0], "input"), (fc.inputs[1], "weights"), (fc.inputs[2], "bias"), (fc.outputs[0], "output"))]
    task = Task("dense", "FULLY_CONNECTED", spec_tasks.OP_FULLY_CONNECTED, payload,
                tensors=[index[n] for n in fc.inputs + fc.outputs], macs=640, relocs=relocs)
    ld = plan.to_loadable(g, [task], {"source": "resnet8"})
    path = tmp_path / "resnet8-fc.nlb"
    ld.save(path)
    back = Loadable.load(path)
    assert [t.name for t in back.inputs()] == g.inputs and [t.name for t in back.outputs()] == g.outputs
    consts = [t for t in back.tensors if t.flags & TensorFlags.CONSTANT]
    assert len(consts) == len(list(g.constants()))
    bases = [0x100000 * (i + 1) for i in range(len(back.regions))]
    cmd = back.command_buffer(bases)
    (_, ttype, rec), = spec_tasks.decode_tasks(cmd)
    assert ttype.name == "FULLY_CONNECTED" and rec["in_features"] == 64 and rec["out_features"] == 10
    for n, f in ((fc.inputs[0], "input"), (fc.inputs[1], "weights"), (fc.outputs[0], "output")):
        p = plan.placements[n]
        assert int(rec[f]) == bases[p.region] + p.offset
    w_desc = back.tensors[index[fc.inputs[1]]]
    wbytes = bytes(back.regions[WEIGHTS].content[w_desc.offset:w_desc.offset + w_desc.nbytes])
    assert wbytes == w.data.tobytes()


def test_add_constant_rejects_duplicates(resnet8_path):
    g = load_tflite(resnet8_path)
    plan = plan_memory(g)
    name = next(iter(g.constants())).name
    with pytest.raises(ValueError, match="already placed"):
        plan.add_constant(name, np.zeros(4, np.int8))
