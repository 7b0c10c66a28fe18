"""Graph clean-ups run before quantization: fold constants, fold affine ops into
convolutions, turn subtraction of constants into addition, fold zero PADs into the
convolutions they feed, fuse activations, drop identities, centre variances written as
``E[x^2] - E[x]^2`` (:mod:`libnpu.compiler.variance`)."""
from __future__ import annotations

import numpy as np

from . import registry
from .float_ref import evaluate, has_reference
from .ir import ACTIVATIONS, Graph, Tensor
from .variance import center_variances

__all__ = ["optimize", "fold_constants", "fold_affine_into_conv", "sub_const_to_add", "fold_pad_into_conv",
           "fuse_activations", "remove_identities", "unshare_weights"]

# The activation ops that are also fused activations (same names).
_ACT_OPS = tuple(a for a in ACTIVATIONS if a != "NONE")


def _weight_axis(op_type: str) -> int | None:
    return registry.get(op_type, "weight_axis")


def _fusable(op_type: str) -> bool:
    """Whether the operator's TFLite kernel applies a fused activation (declared per
    operator: CONCATENATION's options have the field, but its kernel rejects it)."""
    return bool(registry.get(op_type, "fused_activation"))


def fold_constants(g: Graph) -> int:
    """Evaluate ops whose inputs are all constants (e.g. DEQUANTIZE of fp16 weights)."""
    folded = 0
    kept = []
    outputs = set(g.outputs)
    for op in g.ops:
        ins = [g.tensors[i] if i else None for i in op.inputs]
        # (a HOST op without inputs computes constants too: e.g. sparse weights made dense;
        # one giving a model output stays: a step writes every output)
        if (op.inputs or op.type == "HOST" and not outputs & set(op.outputs)) \
                and all(t is None or t.is_constant for t in ins) \
                and has_reference(op.type) and (len(op.outputs) == 1 or op.type == "HOST") \
                and all(t is None or t.quant is None for t in ins):
            vals = [None if t is None else t.data.astype(np.float32) for t in ins]
            value = evaluate(op, vals, g.tensors[op.outputs[0]])
            for name, v in zip(op.outputs, value if isinstance(value, (list, tuple)) else [value]):
                out = g.tensors[name]
                dtype = out.dtype if out.dtype in ("int32", "int64") else "float32"   # shapes stay integers
                g.tensors[name] = Tensor(name, out.shape, dtype, None, np.asarray(v).astype(dtype).reshape(out.shape))
            folded += 1
        else:
            kept.append(op)
    g.ops = kept
    return folded


def _channel_vector(t: Tensor, channels: int) -> np.ndarray | None:
    """The per-channel values of a constant that broadcasts only along the last axis."""
    if not t.is_constant:
        return None
    d = t.data.astype(np.float64)
    if d.size == 1:
        return np.full(channels, float(d.reshape(-1)[0]))
    if d.shape[-1] == channels and d.size == channels:
        return d.reshape(-1)
    return None


def fold_affine_into_conv(g: Graph) -> int:
    """Fold ``conv -> MUL(c) -> ADD(c)`` per-channel constants (batch norm) into weights/bias."""
    folded = 0
    changed = True
    while changed:
        changed = False
        consumers = g.consumers()
        producers = g.producers()
        for op in list(g.ops):
            if op.type not in ("MUL", "ADD", "SUB") or op.attrs.get("activation", "NONE") != "NONE":
                continue
            consts = [i for i in op.inputs if g.tensors[i].is_constant]
            acts = [i for i in op.inputs if not g.tensors[i].is_constant]
            if len(consts) != 1 or len(acts) != 1:
                continue
            if op.type == "SUB" and op.inputs[1] != consts[0]:
                continue
            src = producers.get(acts[0])
            if src is None or _weight_axis(src.type) is None or src.attrs.get("activation", "NONE") != "NONE" \
                    or len(consumers[acts[0]]) != 1 or acts[0] in g.results():
                continue
            w_t = g.tensors[src.inputs[1]]
            if not w_t.is_constant or w_t.quant is not None:
                continue
            axis = _weight_axis(src.type)
            channels = w_t.shape[axis]
            out_shape = g.tensors[op.outputs[0]].shape
            if out_shape != g.tensors[acts[0]].shape:
                continue
            vec = _channel_vector(g.tensors[consts[0]], channels)
            if vec is None:
                continue
            bias_name = src.inputs[2] if len(src.inputs) > 2 else ""
            bias = g.tensors[bias_name].data.astype(np.float64) if bias_name else np.zeros(channels)
            w = w_t.data.astype(np.float64)
            if op.type == "MUL":
                scale = vec.reshape(tuple(-1 if d == axis else 1 for d in range(w.ndim)))
                w, bias = w * scale, bias * vec
            else:
                bias = bias + vec if op.type == "ADD" else bias - vec
            new_w = g.add_const(f"{w_t.name}_folded", w.astype(np.float32)).name
            new_b = g.add_const(f"{bias_name or src.outputs[0] + '/bias'}_folded", bias.astype(np.float32)).name
            src.inputs = [src.inputs[0], new_w, new_b]
            # The conv now produces the affine op's output directly.
            old_out = src.outputs[0]
            src.outputs = [op.outputs[0]]
            g.ops.remove(op)
            g.tensors.pop(old_out, None)
            folded += 1
            changed = True
            break
    return folded


def sub_const_to_add(g: Graph) -> int:
    """``x - c`` -> ``x + (-c)`` for a constant ``c`` (the chip has ADD, not SUB)."""
    changed = 0
    for op in g.ops:
        if op.type == "SUB" and op.inputs[1] and g.tensors[op.inputs[1]].is_constant \
                and not g.tensors[op.inputs[0]].is_constant:
            c = g.tensors[op.inputs[1]]
            neg = g.add_const(f"{c.name}_neg", (-c.data.astype(np.float32)))
            op.type, op.inputs = "ADD", [op.inputs[0], neg.name]
            changed += 1
    return changed


def operator_rewrites(g: Graph) -> int:
    """Apply every operator's float-graph rewrite (``Operator.rewrite``: an activation that
    exporters write as several ops becomes the one op); returns how many were made."""
    return sum(operator.rewrite(g) for operator in registry.operators().values() if operator.rewrite is not None)


__all__ += ["operator_rewrites"]

def _same_grid(a, b) -> bool:
    """Two tensors' quantization parameters (or None for float) are the same."""
    if a is None or b is None:
        return a is b
    return bool(np.array_equal(a.scale, b.scale) and np.array_equal(a.zero_point, b.zero_point))


def fold_pad_into_conv(g: Graph) -> int:
    """Turn ``PAD (zeros, height/width only) -> CONV_2D / DEPTHWISE_CONV_2D`` into the
    convolution's own padding: one task less, and the padded copy never exists. Exact:
    a convolution's padding reads the input zero point, as the PAD's zeros quantize to
    (in an int8 graph the PAD fills with its output zero point, the convolution's input
    one, when both sides of the PAD share a grid). Only while each side stays shorter than
    the dilated filter (what the chip accepts)."""
    folded = 0
    consumers, producers = g.consumers(), g.producers()
    for op in list(g.ops):
        if op.type not in ("CONV_2D", "DEPTHWISE_CONV_2D") or "pads" not in op.attrs:
            continue
        mid = op.inputs[0]
        pad = producers.get(mid)
        if pad is None or pad.type != "PAD" or len(consumers[mid]) != 1 or mid in g.outputs:
            continue
        if not _same_grid(g.tensors[pad.inputs[0]].quant, g.tensors[mid].quant):
            continue        # a PAD between two grids: the convolution would read its input on another
        pairs = tuple(tuple(int(v) for v in pair) for pair in pad.attrs["paddings"])
        if len(pairs) != 4 or pairs[0] != (0, 0) or pairs[3] != (0, 0) or min(min(p) for p in pairs) < 0:
            continue
        kh, kw = g.tensors[op.inputs[1]].shape[1:3]
        dh, dw = op.attrs.get("dilation", (1, 1))
        top, bottom, left, right = op.attrs["pads"]
        pads = (top + pairs[1][0], bottom + pairs[1][1], left + pairs[2][0], right + pairs[2][1])
        if max(pads[:2]) >= (kh - 1) * dh + 1 or max(pads[2:]) >= (kw - 1) * dw + 1:
            continue
        op.attrs["pads"] = pads
        op.inputs[0] = pad.inputs[0]
        g.ops.remove(pad)
        g.tensors.pop(mid, None)
        consumers, producers = g.consumers(), g.producers()
        folded += 1
    return folded


_MOVES = ("RESHAPE", "TRANSPOSE")   # layout moves an elementwise activation commutes with


def fuse_activations(g: Graph) -> int:
    """Turn ``op -> RELU/RELU6/RELU_N1_TO_1`` into the op's fused activation, also across
    RESHAPEs and TRANSPOSEs between them (``op -> moves -> act`` is ``op+act -> moves``:
    a 1-D convolution's [N, C, L] result is such a move away from the kernel's)."""
    fused = 0
    consumers = g.consumers()
    producers = g.producers()
    for act in list(g.ops):
        if act.type not in _ACT_OPS:
            continue
        last = mid = act.inputs[0]
        src = producers.get(mid)
        while src is not None and src.type in _MOVES and len(consumers[mid]) == 1 and mid not in g.results():
            mid = src.inputs[0]
            src = producers.get(mid)
        if src is None or not _fusable(src.type) or src.attrs.get("activation", "NONE") != "NONE":
            continue
        if len(consumers[mid]) != 1 or mid in g.results() or len(consumers[last]) != 1 or last in g.results():
            continue
        src.attrs["activation"] = act.type
        producers[last].outputs = [act.outputs[0]]
        producers[act.outputs[0]] = producers[last]
        g.ops.remove(act)
        g.tensors.pop(last, None)
        fused += 1
    return fused


def remove_identities(g: Graph) -> int:
    """Drop RESHAPEs to the same shape and identity TRANSPOSEs; merge TRANSPOSE pairs and RESHAPE pairs."""
    removed = 0
    producers = g.producers()
    consumers = g.consumers()
    for op in list(g.ops):
        src_name = op.inputs[0] if op.inputs else ""
        out = op.outputs[0] if op.outputs else ""
        if op.type == "TRANSPOSE":
            prev = producers.get(src_name)
            if prev is not None and prev.type == "TRANSPOSE" and len(consumers[src_name]) == 1 \
                    and src_name not in g.results():
                # compose the two permutations into one
                op.attrs = {"perm": tuple(prev.attrs["perm"][p] for p in op.attrs["perm"])}
                op.inputs = list(prev.inputs)
                g.ops.remove(prev)
                g.tensors.pop(src_name, None)
                src_name = op.inputs[0]
                removed += 1
            identity = tuple(op.attrs["perm"]) == tuple(range(len(op.attrs["perm"])))
        elif op.type == "RESHAPE":
            prev = producers.get(src_name)
            if prev is not None and prev.type == "RESHAPE" and len(consumers[src_name]) == 1 \
                    and src_name not in g.results():
                op.inputs = list(prev.inputs)   # a reshape of a reshape is one reshape
                g.ops.remove(prev)
                g.tensors.pop(src_name, None)
                src_name = op.inputs[0]
                removed += 1
            identity = g.tensors[src_name].shape == g.tensors[out].shape
        else:
            continue
        if not identity:
            continue
        if out in g.results():
            # keep the graph output's name: rename the producer's output instead
            p = producers.get(src_name)
            if src_name in g.inputs or p is None or len(consumers[src_name]) != 1:
                continue
            p.outputs = [out if o == src_name else o for o in p.outputs]
            g.tensors.pop(src_name, None)
        else:
            g.replace_uses(out, src_name)
            g.tensors.pop(out, None)
        g.ops.remove(op)
        removed += 1
        producers = g.producers()
        consumers = g.consumers()
    return removed


def unshare_weights(g: Graph) -> int:
    """Give every weighted op its own weight and bias constants: converters deduplicate
    equal buffers (pose_detection's fp16 file shares one bias between two convolutions),
    but each op's weights are quantized with its own scales."""
    copied = 0
    seen: set[str] = set()
    for op in g.ops:
        if _weight_axis(op.type) is None:
            continue
        for k in (1, 2):
            name = op.inputs[k] if len(op.inputs) > k else ""
            if not name or not g.tensors[name].is_constant:
                continue
            if name in seen:
                op.inputs[k] = g.add_const(f"{name}_{op.name}", g.tensors[name].data.copy()).name
                copied += 1
            seen.add(op.inputs[k])
    return copied


def optimize(graph: Graph) -> Graph:
    """Return an optimized copy: constants folded, affine ops and zero PADs folded into
    convs, activations fused, identities removed, unused tensors pruned."""
    g = graph.copy()
    fold_constants(g)
    for t in list(g.constants()):
        if t.dtype == "float16":
            g.tensors[t.name] = Tensor(t.name, t.shape, "float32", None, t.data.astype(np.float32))
    unshare_weights(g)
    fold_affine_into_conv(g)
    sub_const_to_add(g)
    fold_pad_into_conv(g)
    fuse_activations(g)
    center_variances(g)
    remove_identities(g)
    operator_rewrites(g)
    g.prune()
    g.toposort()
    g.validate()
    return g
