"""Command line for the compiler front half.

    python -m libnpu.compiler fetch                      # model files into the cache
    python -m libnpu.compiler summary MODEL              # ops, shapes, MACs
    python -m libnpu.compiler quantize MODEL -o OUT.tflite [--calib X.npy] [--random N]
    python -m libnpu.compiler plan MODEL                 # device memory plan
    python -m libnpu.compiler compile MODEL -o OUT.nlb [--calib X.npy] [--random N] [--method M]
    python -m libnpu.compiler inspect FILE.nlb           # check and describe a loadable

MODEL is a .tflite or .onnx file, or a model-zoo name (``resnet8``, ``blazeface``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from libnpu.tools import model_zoo
from libnpu.loadable import LoadableError
from libnpu.compiler.ir import Graph, IRError


def _load(spec: str) -> Graph:
    if spec in ("resnet8", "blazeface"):
        spec = str(model_zoo.fetch(spec))
    path = Path(spec)
    if not path.is_file():
        raise IRError(f"{spec}: no such file (or model-zoo name: resnet8, blazeface)")
    if path.suffix == ".onnx":
        from libnpu.compiler.onnx_import import load_onnx
        return load_onnx(path)
    from libnpu.compiler.tflite_import import load_tflite
    return load_tflite(path)


def _cmd_fetch(args: argparse.Namespace) -> int:
    for key in model_zoo.ASSETS:
        print(f"{key:10} {model_zoo.fetch(key)}")
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    g = _load(args.model)
    print(g.summary())
    counts = ", ".join(f"{k} {v}" for k, v in sorted(g.op_counts().items()))
    weights = sum(t.nbytes for t in g.constants())
    print(f"ops: {counts}\nMACs: {g.macs():,}  constant bytes: {weights:,}")
    return 0


def _calibration(g: Graph, args: argparse.Namespace) -> list | None:
    if not args.calib:
        return None
    samples = np.load(args.calib).astype(np.float32)
    if len(g.inputs) != 1:
        raise IRError("--calib supports single-input models")
    shape = g.tensors[g.inputs[0]].shape
    return [[s.reshape(shape)] for s in samples]


def _cmd_quantize(args: argparse.Namespace) -> int:
    from libnpu.compiler.quantizer import quantize_model
    from libnpu.compiler.tflite_export import export_tflite
    g = _load(args.model)
    q = quantize_model(g, _calibration(g, args), method=args.method, random_count=args.random,
                       io_dtype="int8" if args.int8_io else "float32")
    Path(args.output).write_bytes(export_tflite(q))
    print(f"wrote {args.output}: {len(q.ops)} ops, calibration {q.metadata['calibration']}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from libnpu.compiler.memplan import plan_memory
    g = _load(args.model)
    plan = plan_memory(g)
    for i, r in enumerate(plan.regions):
        print(f"region {i}: {r.kind.name:<11} {r.size:>10,} bytes  {r.name}")
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from libnpu.compiler.frontend import to_int8_graph
    from libnpu.compiler.lower import lower
    g = _load(args.model)
    q = to_int8_graph(g, _calibration(g, args), method=args.method, random_count=args.random,
                      io_dtype="int8" if args.int8_io else "float32")
    ld = lower(q, metadata={"source": str(args.model)})
    ld.save(args.output)
    print(ld.summary())
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from libnpu.loadable import Loadable
    print(Loadable.load(args.loadable).summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libnpu.compiler", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download the model-zoo files into the cache").set_defaults(fn=_cmd_fetch)
    p = sub.add_parser("summary", help="import a model and print its graph")
    p.add_argument("model")
    p.set_defaults(fn=_cmd_summary)
    for cmd, fn, help_ in (("quantize", _cmd_quantize, "post-training int8 quantization, written as .tflite"),
                           ("compile", _cmd_compile, "compile to a loadable (float models are quantized)")):
        p = sub.add_parser(cmd, help=help_)
        p.add_argument("model")
        p.add_argument("-o", "--output", required=True)
        p.add_argument("--calib", help=".npy array of calibration samples (first axis = sample)")
        p.add_argument("--random", type=int, default=8, help="random calibration runs when --calib is absent")
        p.add_argument("--method", choices=("minmax", "percentile"), default="minmax")
        p.add_argument("--int8-io", action="store_true", help="int8 inputs/outputs instead of float")
        p.set_defaults(fn=fn)
    p = sub.add_parser("plan", help="print the device memory plan")
    p.add_argument("model")
    p.set_defaults(fn=_cmd_plan)
    p = sub.add_parser("inspect", help="check a loadable file and print what it holds")
    p.add_argument("loadable")
    p.set_defaults(fn=_cmd_inspect)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (IRError, model_zoo.ModelZooError, LoadableError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
