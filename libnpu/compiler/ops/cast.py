"""ONNX Cast to the type its input already has: no op (PyTorch's exports cast an STFT's
float slices to float), as is a Cast between float widths (an fp16 conversion's Casts of
its float32 input and outputs: the chip quantizes the values, the float IR and onnxruntime's
CPU kernels compute in float32), and a Cast to an integer type of ids the chip takes as int32
(``integer_inputs.narrowed_index_inputs``: PyTorch's ``.long()`` of a token); a constant's
Cast is folded; any other Cast of a computed tensor is refused here and runs on the CPU."""
from __future__ import annotations

import numpy as np
import onnx

from .. import onnx_import
from ..registry import onnx as onnx_handler


@onnx_handler("Cast")
def _onnx_cast(im, node, attrs, where):
    to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
    x = node.input[0]
    if x in im.consts:
        im.consts[node.output[0]] = np.asarray(im.consts[x]).astype(to)
        return
    have = np.dtype(im.g.tensors[im.env[x][0]].dtype)
    # ids the chip takes as int32 stay them; a float tensor cast to integers is no id yet (deepcut's
    # float ids: the Cast runs on the CPU, so its readers get integers)
    if have != to and not (x in im.narrowed and to.kind == "i" and have.kind in "iu") \
            and not (have.kind == to.kind == "f"):      # between float widths: the float IR's float32
        raise onnx_import.ONNXImportError(f"{where}: a Cast from {have} to {to} of a computed tensor")
    im.env[node.output[0]] = im.env[x]
