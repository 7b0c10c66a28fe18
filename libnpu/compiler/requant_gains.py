"""What the chip's int64 requantization makes of an int16 op's multiplier, for the float
simulation to apply as the chip does.

The operators that declare ``q15_requant`` (:class:`~libnpu.compiler.registry.Operator`:
the int16-activation convolutions and matrix product) requantize their int64 accumulators
with TFLite's int64 ``MultiplyByQuantizedMultiplier``, which reduces the Q31 multiplier to Q15
(:func:`npu_hw.fixedpoint.reduce_to_q15`): every output of a channel is scaled by the same
factor, up to 2**-15 off 1 (:func:`npu_hw.fixedpoint.q15_gain`). The float simulation
(:class:`libnpu.compiler.float_ref.FloatInterpreter`), which the escalation measures a
compile's fidelity with, multiplies those ops' outputs by it, so that it predicts the
device: on a face mesh whose 106 int16 layers each carried such a factor, the device's
presence logit was 0.108 off float where the simulation without it said 0.0105. The
compiler picks int16 weight steps that make the factor 1
(:func:`libnpu.compiler.scales.quantize_weights16`); int8 weights on int16 activations and
a matrix product of two activations keep theirs.
"""
from __future__ import annotations

import numpy as np

from npu_hw import fixedpoint as fp

from . import registry
from .ir import Graph, Op
from .qparams import op_params

__all__ = ["NEGLIGIBLE_GAIN", "requant_gain"]

#: A factor this close to 1 moves no output of an int16 grid (32767 steps x 2**-20 = 0.03
#: step): the float32 scales' own rounding leaves such factors where the compiler made the
#: Q15 multiplier exact.
NEGLIGIBLE_GAIN = 2.0 ** -20


def requant_gain(graph: Graph, op: Op) -> np.ndarray | None:
    """The factor (one, or one per output channel: the last axis) by which the chip's Q15
    requantization scales ``op``'s real output, or None where the chip applies its
    multiplier exactly (not an int16 op of a ``q15_requant`` operator, or every factor 1)."""
    if not registry.get(op.type, "q15_requant") or not op.inputs or not all(
            graph.tensors[n].dtype == "int16" and graph.tensors[n].quant is not None
            for n in (op.inputs[0], op.outputs[0])):
        return None
    p = op_params(graph, op)
    gain = fp.q15_gain(np.atleast_1d(np.asarray(p["multiplier"], np.int64)))
    return None if np.all(np.abs(gain - 1) <= NEGLIGIBLE_GAIN) else gain.astype(np.float32)
