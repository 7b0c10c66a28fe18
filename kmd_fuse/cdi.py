"""Container Device Interface (CDI) specs for the emulated devices: how a container
runtime (podman, containerd, CRI-O) hands ``npuN`` to a container.

The node is a regular file served by FUSE, not a character device: runc refuses it as a
CDI ``deviceNodes`` entry ("not a device node"). It reaches the container as a bind
mount instead, together with the device's hand-over socket, mounted at the same path as
on the host because MEM_MAP answers with the socket's host path (without it the first
MEM_MAP fails with ENOENT). The socket alone, not the driver's whole state directory:
that one also holds the chip's bus directory, the pid files and the logs of every device
of the devroot. The environment points libnpu at the container's
devroot and, with ``NPU_VISIBLE_DEVICES``, at the device: the program says "device 0"
whichever node it was given.

What a container then sees of the host (docs/security.md): the node (every request the
driver accepts from its user, under the per-user limits), the device's hand-over socket
(which hands out nothing without a MEM_MAP token of a context of one's own) and the host
path of the state directory (its name: the socket's parents appear as empty directories).
One spec per devroot; ``container_edits`` also serves the device plugin's Allocate, so a
runtime without CDI gets the same mounts and variables.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kmd_fuse.served_devices import ServedDevice

CDI_VERSION = "0.5.0"                # the newest podman 4.3 (Debian 12) accepts; mounts and env need no more
VENDOR = "npu-emu.io"
CLASS = "npu"
KIND = f"{VENDOR}/{CLASS}"           # also the Kubernetes resource name
CONTAINER_DEVROOT = "/dev"
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")   # where runtimes look for specs (CDI's default)


@dataclass(frozen=True)
class ContainerEdits:
    """What a runtime does to a container so that it reaches some devices: bind mounts
    (host path, container path, read-only) and environment variables."""
    mounts: list[tuple[str, str, bool]]
    env: dict[str, str]


def device_name(index: int) -> str:
    """The CDI device name of ``npu<index>`` (fully qualified: ``npu-emu.io/npu=npu3``)."""
    return f"npu{index}"


def qualified_name(index: int, kind: str = KIND) -> str:
    return f"{kind}={device_name(index)}"


def check_kind(kind: str) -> str:
    """``kind`` if it is a CDI kind (``vendor.domain/class``), else ValueError saying why."""
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?", kind):
        raise ValueError(f"{kind!r}: not a CDI kind (vendor.example/class: letters, digits, '.', '-', '_')")
    return kind


def container_edits(devices: list[ServedDevice], container_devroot: str = CONTAINER_DEVROOT) -> ContainerEdits:
    """The mounts and variables that give a container ``devices``, renumbered from 0 in
    the order given (``NPU_VISIBLE_DEVICES``)."""
    mounts: list[tuple[str, str, bool]] = []
    for device in devices:
        mounts.append((str(device.node), os.path.join(container_devroot, device.node.name), False))
        # a socket is connected to, which a read-only mount still allows
        mounts.append((str(device.socket), str(device.socket), True))
    env = {"NPU_DEVROOT": container_devroot, "NPU_VISIBLE_DEVICES": ",".join(str(d.index) for d in devices)}
    return ContainerEdits(mounts, env)


def _cdi_edits(edits: ContainerEdits) -> dict:
    return {"env": [f"{name}={value}" for name, value in edits.env.items()],
            "mounts": [{"hostPath": host, "containerPath": inside,
                        "options": ["bind", "ro" if read_only else "rw"]}
                       for host, inside, read_only in edits.mounts]}


def cdi_spec(devices: list[ServedDevice], container_devroot: str = CONTAINER_DEVROOT, kind: str = KIND) -> dict:
    """The CDI spec (as JSON data) with one device per ``npuN`` and ``all``. Two specs of
    one kind must not name the same device: give each devroot a kind of its own.

    A container given several devices one by one gets the variables of the last one
    named (CDI merges env by name): give it ``all``, or set ``NPU_VISIBLE_DEVICES``
    yourself; the Kubernetes device plugin computes it over the whole allocation."""
    entries = [{"name": device_name(device.index),
                "containerEdits": _cdi_edits(container_edits([device], container_devroot))}
               for device in devices]
    if devices:
        entries.append({"name": "all", "containerEdits": _cdi_edits(container_edits(devices, container_devroot))})
    return {"cdiVersion": CDI_VERSION, "kind": check_kind(kind), "devices": entries}


def write_spec(spec: dict, path: Path) -> None:
    """Write ``spec`` to ``path`` atomically (a runtime reading the directory never sees
    half a file), mode 0644: runtimes read it as any user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(spec, indent=2) + "\n")
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)
