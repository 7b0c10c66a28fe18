"""DENSIFY: a sparse constant (TFLite ``SparsityParameters``, decoded when the tensor is
imported, ``compiler.tflite_sparsity``) made dense. The chip runs dense weights, so the
operator folds away at import: its output becomes the dense constant."""
from __future__ import annotations

from ..registry import Operator, register, tflite_options
from ..tflite_import import TFLiteImportError


def _tflite_densify(im, ins, outs, table, where):
    data = im.const(ins[0], "the sparse operand", where)
    out = im.graph.tensors[im.tensor(outs[0])]
    if data.size != out.size:
        raise TFLiteImportError(f"{where}: densified {data.shape} does not fit the output {out.shape}")
    out.data = data.astype(out.dtype).reshape(out.shape)
    return None


register(Operator("DENSIFY", tflite=_tflite_densify))


# The options table each builtin's TFLite form carries (None: none), for the LiteRT delegate.
tflite_options(DENSIFY=None)
