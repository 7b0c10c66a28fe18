"""Which device a program uses: ``NPU_VISIBLE_DEVICES``, ``NPU_DEVICE`` and ``--device``, one rule.

- ``NPU_VISIBLE_DEVICES`` (``CUDA_VISIBLE_DEVICES``' form) lists the device nodes the
  program may see, renumbered from 0: with ``NPU_VISIBLE_DEVICES=2,5`` it sees two
  devices, 0 (``npu2``) and 1 (``npu5``). Unset: every node, each by its own number;
  set but empty: none. A schedulers sets it per job (Slurm's task prolog, Kubernetes'
  Allocate, Ray's resource), so that the job's code says "device 0" wherever it runs.
- A device index counts in that visible list, wherever one is given: ``Session.open(i)``,
  ``libnpu.load(model, i)``, the LiteRT delegate's ``device=`` option, the C API's
  ``NPU_DEVICE`` and ``npu ... --device N``.
- When none is given, the index is ``NPU_DEVICE``, else 0. ``npu --device N`` sets
  ``NPU_DEVICE`` for the command (and the processes it starts): ``--device`` wins over the
  environment.
"""
from __future__ import annotations

import errno
import os

__all__ = ["VISIBLE", "DEFAULT", "DeviceChoiceError", "visible_devices", "default_index", "node_number"]

VISIBLE = "NPU_VISIBLE_DEVICES"
DEFAULT = "NPU_DEVICE"


class DeviceChoiceError(OSError):
    """A device index or variable that names no visible device (ENODEV), or that is no
    device number at all (EINVAL)."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def _number(text: str, what: str) -> int:
    if not text.strip().isdigit():
        raise DeviceChoiceError(errno.EINVAL, f"{what}: expected a device number (0, 1, ...), not {text!r}")
    return int(text)


def visible_devices() -> list[int] | None:
    """The node numbers ``NPU_VISIBLE_DEVICES`` makes visible, in their visible order;
    None when it is unset (every node, by its own number)."""
    text = os.environ.get(VISIBLE)
    if text is None:
        return None
    numbers = [_number(part, f"{VISIBLE}={text!r}") for part in text.split(",") if part.strip()]
    if len(set(numbers)) != len(numbers):
        raise DeviceChoiceError(errno.EINVAL, f"{VISIBLE}={text!r}: a device listed twice")
    return numbers


def default_index() -> int:
    """The device index used when none is given: ``NPU_DEVICE``, else 0."""
    text = os.environ.get(DEFAULT, "")
    return _number(text, f"{DEFAULT}={text!r}") if text.strip() else 0


def node_number(index: int | None = None) -> int:
    """The number of the node (``npuN``) behind visible device ``index`` (None: the
    default index)."""
    if index is None:
        index = default_index()
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise DeviceChoiceError(errno.EINVAL, f"device {index!r}: expected a device number (0, 1, ...)")
    visible = visible_devices()
    if visible is None:
        return index
    if index >= len(visible):
        shown = f"devices 0-{len(visible) - 1}" if visible else "no device"
        raise DeviceChoiceError(errno.ENODEV, f"device {index} is not visible: "
                                              f"{VISIBLE}={os.environ[VISIBLE]!r} shows {shown}")
    return visible[index]
