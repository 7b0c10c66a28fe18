"""Runs inside a container started from the CDI spec: loads a compiled model on the
device the spec's variables name and writes its output.

    python container_infer.py MODEL.nlb INPUT.npy OUTPUT.npy

Prints the device nodes the container sees. The device is opened by the node
``$NPU_DEVROOT/npu<$NPU_VISIBLE_DEVICES>`` itself, so this works with or without
libnpu's reading of NPU_VISIBLE_DEVICES (with it, ``libnpu.load(model)`` would do).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import libnpu
from libnpu.portability import Device


def main(model: str, inputs: str, output: str) -> None:
    devroot = Path(os.environ["NPU_DEVROOT"])
    number = int(os.environ["NPU_VISIBLE_DEVICES"])
    print("nodes:", " ".join(sorted(p.name for p in devroot.glob("npu[0-9]*"))), flush=True)
    with Device(devroot / f"npu{number}", number) as device:
        compiled = libnpu.load(model, device)
        np.save(output, compiled.infer([np.load(inputs)])[0])
        compiled.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
