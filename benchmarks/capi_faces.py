"""Acceptance script: a C program written only against npu.h runs BlazeFace 1,000 frames in a row.

Run from the repository root (not in CI: about 30 ms a frame on 2 shared CPUs)::

    .venv/bin/python -m benchmarks.capi_faces [--frames 1000] [--json]

Builds ``examples/face_detect.c`` with the flags ``npu capi`` prints, starts a device of
its own, and runs the program on scikit-image's astronaut (resized to 128x128 RGB): every
frame must find the first frame's face (the program checks), far past the 256-entry
command ring (the seed DLL died at frame 128). Prints the face, the frames, the wall
time per frame and exits 0 when the program did. ``tests/libnpu/tools/test_c_runtime.py``
runs the same program for 300 frames.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from libnpu import model_zoo
from libnpu.tools.c_libraries import RUNTIME
from libnpu.tools.vision import resize

from .scratch_device import ScratchDevice

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "face_detect.c"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.capi_faces", description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="capi-faces-") as tmp:
        program = Path(tmp) / "face_detect"
        subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", str(EXAMPLE), *RUNTIME.cflags().split(),
                        *RUNTIME.libs().split(), "-o", str(program)], check=True)
        picture = Path(tmp) / "astronaut_128.rgb"
        np.clip(resize(model_zoo.sample_image(), 128, 128) + 0.5, 0, 255).astype(np.uint8).tofile(picture)
        model = model_zoo.blazeface_short_range()
        device = ScratchDevice().start()
        try:
            env = {**os.environ, "NPU_DEVROOT": str(device.devroot)}
            subprocess.run([str(program), str(model), str(picture), "1"], env=env, check=True,
                           capture_output=True)      # compile and cache the model first
            started = time.perf_counter()
            done = subprocess.run([str(program), str(model), str(picture), str(args.frames)], env=env,
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - started
        finally:
            device.stop()
    report = {"frames": args.frames, "exit_status": done.returncode, "seconds": round(seconds, 2),
              "ms_per_frame": round(seconds * 1e3 / args.frames, 2),
              "faces": [line for line in done.stdout.splitlines() if line.startswith("face ")],
              "stderr": done.stderr.strip()}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(done.stdout.strip())
        if done.stderr:
            print(done.stderr.strip(), file=sys.stderr)
        print(f"{args.frames} frames in {seconds:.1f} s: {report['ms_per_frame']} ms a frame "
              f"(load, pre/post-processing and inference, one process)")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
