"""HOST: an operator the chip lacks, run by the host between the chip's partitions.

Not an operator of any model format: the importers make one for every source operator
the placement decision (:mod:`libnpu.compiler.placement`) puts on the CPU (for a
``.tflite``, one per run of consecutive such operators). Its one attribute is the
:class:`libnpu.host.HostCall` (the cut sub-model and the source operators' names); its
inputs and outputs are the activations the rest of the graph gives and takes. The
lowering emits no chip task for it: the runtime runs it on the host in its place.
"""
from __future__ import annotations

import functools

import numpy as np

from ...host import FLOAT, Boundary, HostCall, HostKernel, kernel_for
from ..registry import Operator, register


@functools.lru_cache(maxsize=256)
def _kernel(call: HostCall) -> HostKernel:
    return kernel_for(call)


def _float_host(op, ins, out):
    """The host kernel on real values (calibration and float checks)."""
    kernel = _kernel(op.attrs["host"])
    values = [np.asarray(v) if np.asarray(v).dtype.kind in "iub" else np.asarray(v, np.float32)
              for v in ins if v is not None]        # integers (a model's int64 input) as they are
    sources = [Boundary(v.dtype.name) if v.dtype.kind in "iub" else FLOAT for v in values]
    outs = kernel.run(values, sources, [b if b.dtype in ("int32", "int64", "bool") else FLOAT
                                        for b in kernel.outputs][:len(op.outputs)])
    return outs[0] if len(outs) == 1 else outs


register(Operator("HOST", ("host",), float_ref=_float_host))
