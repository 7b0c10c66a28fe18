"""A stateful model's variable as OpenVINO's ``VariableState``: read, set and reset in the
device memory of the request that owns it."""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from libnpu.loadable import TensorDesc
from libnpu.tensors import ArrayLike, dequantize, quantize

__all__ = ["VariableState"]


class Owner(Protocol):
    """What a variable needs of the request that owns it (libnpu.inference.InferRequest,
    which sits above this module)."""
    model: Any

    def _check_idle(self) -> None: ...


class VariableState:
    """One variable of a request (OpenVINO's ``VariableState``): its ``name``, its current
    value ``state`` (a copy, in the model's dtype), ``set_state`` and ``reset``.  The value
    lives in the request's device memory; these read or write it between inferences."""

    def __init__(self, request: Owner, desc: TensorDesc, view: np.ndarray):
        self._request, self.desc, self._view = request, desc, view
        self.name = request.model.loadable.regions[desc.region].name.removeprefix("state:")

    @property
    def state(self) -> np.ndarray:
        """The current value (a copy)."""
        self._request._check_idle()
        return self._view.copy()

    def dequantized(self) -> np.ndarray:
        """The current value as float32, with the variable's scale and zero point."""
        return dequantize(self.state, self.desc)

    def set_state(self, value: ArrayLike) -> None:
        """Overwrite the value: an array of the variable's shape in its dtype (or a float
        array, quantized with its scale and zero point)."""
        self._request._check_idle()
        array = np.asarray(value)
        if array.shape != self.desc.shape:
            raise ValueError(f"state {self.name}: shape {array.shape}, expected {self.desc.shape}")
        if np.issubdtype(array.dtype, np.floating) and self.desc.scale is not None:
            array = quantize(array, self.desc)
        elif array.dtype != np.dtype(self.desc.dtype):
            raise ValueError(f"state {self.name}: dtype {array.dtype}, expected {self.desc.dtype}")
        self._view[...] = array

    def reset(self) -> None:
        """Back to the initial value the model declares."""
        self._request._check_idle()
        initial = self._request.model.loadable.regions[self.desc.region].content
        assert initial is not None, "the compiler gives every STATE region its initial value"
        self._view[...] = np.frombuffer(bytes(initial[:self.desc.nbytes]), self.desc.dtype).reshape(self.desc.shape)

    def __repr__(self) -> str:
        return f"<VariableState {self.name} {list(self.desc.shape)} {self.desc.dtype}>"
