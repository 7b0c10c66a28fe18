"""The shapes of a TFLite model's dynamic tensors, which only running it tells: LiteRT's shapes after an invoke.

TF's converter stores a placeholder (1) for each dimension it could not fix (``-1`` in
the tensor's ``shape_signature``). LiteRT's ``allocate_tensors`` computes the others from
the inputs' shapes (every kernel's Prepare), but a tensor whose shape an operand computes
at run time (a RESHAPE, SLICE or FILL fed by SHAPE -> REDUCE_PROD -> FLOOR_DIV: how
``tf.signal.frame`` counts an audio clip's frames) stays dynamic, its data unallocated,
until the kernel runs. Imported with the placeholder, a 43-frame spectrogram became one
frame, and every layer after it the wrong size.

:func:`dynamic_tensor_shapes` finds those tensors and runs the model (LiteRT's builtin
kernels, no delegate) on two different inputs of the given shapes; a tensor that has the
same shape after both takes it. One whose shape follows the data (two runs disagree) keeps
its placeholder, for the importer to refuse or the host to run.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

__all__ = ["placeholder_tensors", "dynamic_tensor_shapes"]


def placeholder_tensors(model) -> list[int]:
    """The tensors of subgraph 0 of ``model`` (a ``tflite.Model``) other than the model inputs
    with a free dimension (``-1`` in their shape signature) when an operator computes a
    shape at run time (a SHAPE: how a size reaches an operand), else none: the others'
    shapes follow from the inputs' in every kernel's Prepare (a Keras model's ``-1`` batch
    on every tensor costs no run)."""
    import tflite  # type: ignore[import-untyped]   # lazy: input_shapes (which the CLI imports) imports this module
    subgraph = model.Subgraphs(0)
    codes = [max(int(model.OperatorCodes(k).BuiltinCode()), int(model.OperatorCodes(k).DeprecatedBuiltinCode()))
             for k in range(model.OperatorCodesLength())]
    if not any(codes[subgraph.Operators(i).OpcodeIndex()] == tflite.BuiltinOperator.SHAPE
               for i in range(subgraph.OperatorsLength())):
        return []
    inputs = {int(j) for j in (subgraph.InputsAsNumpy() if subgraph.InputsLength() else [])}
    return [j for j in range(subgraph.TensorsLength()) if j not in inputs and subgraph.Tensors(j).ShapeSignatureLength()
            and (subgraph.Tensors(j).ShapeSignatureAsNumpy() < 0).any()]


def dynamic_tensor_shapes(data: bytes, inputs: Mapping[int, tuple[int, ...]],
                          candidates: Collection[int]) -> dict[int, tuple[int, ...]]:
    """Tensor index -> shape, for the tensors of ``candidates`` (:func:`placeholder_tensors`),
    as two runs with ``inputs`` (tensor index -> shape) agree on it, when LiteRT leaves one of
    them unallocated (dynamic) after ``allocate_tensors`` (a RESHAPE's output, in place, has
    its input's data, not its shape: every candidate takes the runs' shape). Empty when none
    is dynamic, or when LiteRT cannot run the model (a custom operator it lacks: the
    importer and the host say what they make of it)."""
    # lazy: LiteRT takes ~0.5 s to import (see input_shapes)
    from ai_edge_litert.interpreter import Interpreter, OpResolverType  # type: ignore[import-untyped]
    try:
        interp = Interpreter(model_content=bytes(data),
                             experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        for index, shape in inputs.items():
            interp.resize_tensor_input(index, list(shape), strict=False)
        interp.allocate_tensors()
        if not any(_unallocated(interp, j) for j in candidates):
            return {}
        runs = []
        for fill in (0, 1):
            for d in interp.get_input_details():
                interp.set_tensor(d["index"], _input(d["shape"], np.dtype(d["dtype"]), fill))
            interp.invoke()
            shapes = {d["index"]: tuple(int(x) for x in d["shape"]) for d in interp.get_tensor_details()}
            runs.append({j: shapes[j] for j in candidates if j in shapes})
    except (RuntimeError, ValueError):
        return {}
    return {j: shape for j, shape in runs[0].items() if runs[1].get(j) == shape}


def _unallocated(interp, index: int) -> bool:
    try:
        interp.tensor(index)()
    except ValueError:      # "Tensor data is null": a dynamic tensor, sized when its kernel runs
        return True
    return False


def _input(shape, dtype: np.dtype, fill: int) -> np.ndarray:
    """Zeros, or (``fill`` 1) values that differ from them: a shape that follows the data shows."""
    if dtype.kind == "f":
        return np.random.default_rng(0).uniform(-1, 1, shape).astype(dtype) if fill else np.zeros(shape, dtype)
    if dtype.kind == "b":
        return np.full(shape, bool(fill))
    return np.full(shape, fill, dtype)
