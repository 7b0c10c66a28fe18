"""What shape inference without the weights' bytes saves an ONNX import
(``libnpu/compiler/onnx_shapes.py``): ``onnx.shape_inference.infer_shapes`` (as the importer
called it: the whole model serialized for each call) and ``onnx_shapes.infer_shapes`` timed
alternately in one run on the same model, with the load average and the two results checked
equal. Run from the repository root::

    python -m benchmarks.onnx_shapes                        # ddddocr-rec from the corpus cache
    python -m benchmarks.onnx_shapes MODEL.onnx --input-shape input1=1,1,64,256 --rounds 7

(see the numbers this printed in docs/security.md, "Compiles that never crash").
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import shape_inference

from libnpu.compiler.input_shapes import fix_input_shapes, parse_input_shapes
from libnpu.compiler.onnx_shapes import infer_shapes

DEFAULT = Path.home() / ".cache/npu-emu/corpus/models/ddddocr/ddddocr/common.onnx"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(DEFAULT), help="an .onnx file (default: ddddocr-rec)")
    parser.add_argument("--input-shape", action="append", default=None, metavar="NAME=D,D,...",
                        help="shapes of free input dimensions (default for ddddocr-rec: input1=1,1,64,256)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    texts = args.input_shape or (["input1=1,1,64,256"] if args.model == str(DEFAULT) else [])
    data, _, _ = fix_input_shapes(Path(args.model), "onnx", parse_input_shapes(texts) if texts else None)
    model = onnx.load_model_from_string(data if isinstance(data, bytes) else Path(data).read_bytes())
    whole, light = [], []
    for _ in range(args.rounds):
        started = time.perf_counter()
        a = shape_inference.infer_shapes(model, strict_mode=True)
        whole.append(time.perf_counter() - started)
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        started = time.perf_counter()
        b = infer_shapes(copy, strict_mode=True)
        light.append(time.perf_counter() - started)
    if list(a.graph.value_info) != list(b.graph.value_info) or list(a.graph.output) != list(b.graph.output):
        raise SystemExit("the two inferences differ")
    w, li = statistics.median(whole), statistics.median(light)
    print(f"{Path(args.model).name}: {model.ByteSize() / 1e6:.1f} MB, load average {os.getloadavg()[0]:.1f}, "
          f"median of {args.rounds} rounds per shape inference")
    print(f"  onnx.shape_inference.infer_shapes  {w:.3f} s")
    print(f"  onnx_shapes.infer_shapes           {li:.3f} s   ({w / li:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
