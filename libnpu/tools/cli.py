"""``npu``: the user-side command line, one parser built from one table of commands.

Each row of :data:`COMMANDS` is a command: its words (``("bench", "model")``), its help,
its arguments and its handler in :mod:`libnpu.tools.commands`.  A new command is one
handler and one row.  Every command that uses a device takes ``--devroot`` (default
``$NPU_DEVROOT``, else ``/dev``), and those that use one device ``--device N`` (an index
in ``$NPU_VISIBLE_DEVICES``' list, over ``$NPU_DEVICE``: :mod:`libnpu.visible_devices`);
the compile-side commands (``compile``, ``inspect``, ``fetch``) use none and refuse it.

Exit codes, the same for every command: 0 done, 1 it failed (the device, the compiler,
a download, a damaged file), 2 usage (bad arguments, or a model, input or calibration
file that cannot be used as named); the ``npu`` script (:mod:`npu_console`) adds 130
(Ctrl-C) and 141 (stdout's reader gone).  ``main`` returns the code and never raises
``SystemExit`` itself (``--help`` returns 0).  Whatever goes wrong, stderr gets one line
naming the problem and the next step; ``--debug`` (or ``NPU_DEBUG=1``) adds the traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libnpu import visible_devices
from libnpu.portability import default_devroot
from npu_console import run_main, stdout_reader_gone

from . import commands
from .errors import OneLineParser, debug_wanted, device_hint

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

MODEL = "a .tflite, .onnx or .nlb file, or a model-zoo name (resnet8, blazeface, kws, vww, anomaly)"


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]                                   # ("info",) or ("bench", "nop")
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    device: bool = True                                      # takes --devroot
    one_device: bool = True                                  # uses one device: takes --device


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", help="compile cache directory (default $NPU_CACHE_DIR/compiled)")


def _info_args(p: argparse.ArgumentParser) -> None:
    _json(p)


def _monitor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sysroot", help="root of the attribute tree (default $NPU_SYSROOT, else the one the driver "
                                     "serves for --devroot)")
    p.add_argument("--procroot", default="/proc", help=argparse.SUPPRESS)
    p.add_argument("-i", "--id", type=int, action="append", dest="ids", metavar="N", help="only device N (repeatable)")
    _json(p)


def _smi_args(p: argparse.ArgumentParser) -> None:
    _monitor_args(p)
    p.add_argument("--interval", type=float, default=0.2,
                   help="seconds to sample utilization over; 0 skips it (default 0.2)")


def _top_args(p: argparse.ArgumentParser) -> None:
    _monitor_args(p)
    p.add_argument("-d", "--delay", type=float, default=1.0, help="refresh interval in seconds (default 1)")
    p.add_argument("-n", "--iterations", type=int, help="stop after this many frames")
    p.add_argument("-b", "--batch", action="store_true",
                   help="append frames instead of redrawing the screen (like top -b)")


def _calibration_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", help="calibration data: a .npy file (samples on the first axis) or a "
                                         "directory of .npy files and .png pictures (preprocessed as "
                                         "--input-range or --mean/--std say); for a model with several "
                                         "inputs an .npz file of arrays named as the inputs (numpy.savez, "
                                         "samples on the first axis) or a directory of them")
    p.add_argument("--input-range", metavar="LO,HI",
                   help="map picture pixels 0..255 to [LO, HI], the model's own preprocessing "
                        "(default -1,1; mediapipe models: 0,1)")
    p.add_argument("--mean", metavar="M[,M,M]", help="instead of --input-range: (pixel - mean) / std, "
                                                    "per channel, in pixel units 0..255")
    p.add_argument("--std", metavar="S[,S,S]", help="with --mean (default 1)")
    p.add_argument("--random-calibration", type=int, metavar="N", help="calibrate on N random inputs (default 8)")
    p.add_argument("--method", choices=("minmax", "percentile", "mse", "entropy"), default="minmax",
                   help="how activation ranges are chosen from the calibration data (default minmax)")
    p.add_argument("--percentile", type=float, help="with --method percentile: the kept percentile (default 99.99)")
    p.add_argument("--recipe", choices=("default", "fast", "accurate"), default="default",
                   help="default: hold out a fifth of the calibration samples, quantize on the rest and escalate "
                        "(int8, int16 activations, int16 weights, bias correction: at most 4 steps) until every "
                        "output reaches --target on the held-out ones; fast: int8 only, nothing measured; "
                        "'accurate' = --weight-rounding gptq --int16 auto --int16-target 0.999 --int16-weights auto "
                        "--equalize --int16-grid per-channel (slower to compile and, where layers go int16, to run); "
                        "options given explicitly win (default: default)")
    p.add_argument("--target", type=float, metavar="COS",
                   help="with the default recipe: the score every output must reach on the held-out samples "
                        "(cosine vs float; outputs of < 8 values: 1 - max|error| / max|value|; default 0.99)")
    p.add_argument("--escalation-budget", type=float, metavar="FACTOR",
                   help="with the default recipe: the escalation steps after int8 do at most FACTOR times the "
                        "int8 step's work (op evaluations: the same under any load), the step running at the cap "
                        "stopped there and the best one measured kept; 0: no cap (default 12)")
    p.add_argument("--weight-rounding", choices=("nearest", "gptq", "gptq-bias"),
                   help="gptq: round conv/depthwise/FC weights for the calibration data's inputs (GPTQ) instead of "
                        "to the nearest step; gptq-bias: the biases too take up the weights' mean error "
                        "(default nearest)")
    p.add_argument("--bias-correction", action=argparse.BooleanOptionalAction,
                   help="correct each layer's bias for its mean quantization error on the calibration data "
                        "(default off; --no-bias-correction turns off a recipe's)")
    p.add_argument("--equalize", action=argparse.BooleanOptionalAction,
                   help="lift activation channels their tensor's grid starves, the next depthwise layer dividing "
                        "them back (same float function; default off; --no-equalize turns off a recipe's)")
    p.add_argument("--fc-per-tensor", action="store_true",
                   help="per-tensor fully connected weights (default per channel)")
    p.add_argument("--int8-io", action="store_true", help="int8 inputs/outputs instead of float")
    p.add_argument("--state", action="append", metavar="IN=OUT", default=[],
                   help="carry output OUT into input IN between calls: a stateful model (repeatable)")


def _shape_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D,D,...",
                   help="the shape of input NAME, for inputs with free dimensions (ONNX dim_param, TFLite -1); "
                        "repeatable; D,D,... alone for a single-input model. A free leading batch dimension is 1 "
                        "unless given; any other free dimension must be given (docs/models.md)")


def _placement_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", metavar="OP,OP", help="allow-list: only these operators (TFLite builtin names, ONNX op "
                                                  "types) run on the NPU, the others on the CPU")
    p.add_argument("--strict", action="store_true",
                   help="refuse any CPU fallback: fail, listing every operator the NPU cannot run")


def _int16_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--int16", metavar="auto|none|NAME,...",
                   help="int16 activations (a16w8) for the layers int8 loses most on ('auto': the worst, until "
                        "the outputs reach --int16-target against float), or for the named ops / tensors "
                        "(default none)")
    p.add_argument("--int16-target", type=float, metavar="SCORE",
                   help="output score 'auto' aims at: cosine vs float, for outputs of < 8 values "
                        "1 - max|error| / max|value| (default 0.99; with --recipe accurate 0.999)")
    p.add_argument("--int16-max-layers", type=int, metavar="N", help="promote at most N layers with 'auto'")
    p.add_argument("--int16-weights", metavar="auto|none|NAME,...",
                   help="int16 weights too (a16w16, our chip mode) on int16 layers with weights ('auto': the "
                        "worst, until the outputs score 0.999; default none, 'auto' with --recipe accurate)")
    p.add_argument("--int16-headroom", metavar="FACTOR|held-out",
                   help="how far int16 grids reach beyond the calibrated range: a factor in [1, 16] for every "
                        "tensor, or 'held-out': each tensor's own, from how far one calibration sample exceeds "
                        "the others (default 2)")
    p.add_argument("--int16-grid", choices=("per-tensor", "per-channel"),
                   help="int16 activation grids: one scale per tensor, or one per channel of the last axis where "
                        "the ops around a tensor can take it (default per-tensor; per-channel with --recipe accurate)")


def _compile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=MODEL.replace(".nlb ", ""))
    p.add_argument("-o", "--output", required=True,
                   help="the file to write: a loadable (.nlb), or the int8 model as .tflite (quantize only)")
    _shape_args(p)
    p.add_argument("--freeze-input", action="append", default=[], metavar="NAME=V[,V...]",
                   help="make ONNX input NAME a constant of these values (its declared shape and dtype), "
                        "so what it drives folds away, e.g. sr=16000 (OpenVINO's --input \"sr[]->16000\"); "
                        "repeatable")
    _placement_args(p)
    p.add_argument("--min-npu-partition", type=int, metavar="MACS",
                   help="a chip partition between two host calls doing fewer multiply-adds than this runs on the "
                        "CPU with them, saving a device trip (default 100000; 0: off; docs/models.md)")
    p.add_argument("--tiles", type=int, metavar="N",
                   help="plan one inference for N cores: large layers split into row bands the chip runs side by "
                        "side by their dependencies (libnpu.load's NPU_TILES; default 1)")
    _calibration_args(p)
    _int16_args(p)
    p.add_argument("--report", action="store_true",
                   help="print where each operator runs (NPU or CPU, and why) and a summary; for float models "
                        "also each layer's quantization error vs float on the calibration data")
    p.add_argument("--report-all", action="store_true", help="with --report: every layer, not the 10 worst")
    p.add_argument("--no-progress", action="store_true")
    _cache(p)
    _json(p)


def _inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a loadable (.nlb: checked, then described) or a model (its graph) - " + MODEL)
    p.add_argument("--plan", action="store_true", help="a model's device memory plan too")
    p.add_argument("--ops", metavar="OP,OP", help="placement with this allow-list of NPU operators")
    _shape_args(p)


def _fetch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", help="model-zoo files to fetch (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no download lines on stderr (a terminal gets them)")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=MODEL)
    p.add_argument("--input", action="extend", nargs="+", metavar="FILE.npy",
                   help="one .npy per model input, in the model's input order (random inputs when omitted)")
    p.add_argument("--save", metavar="DIR", help="write DIR/output_<index>.npy in the model's output dtypes")
    p.add_argument("--repeat", type=int, default=5, help="timed inferences after the first (default 5)")
    p.add_argument("--fresh", action="store_true", help="compile into an empty cache (measures a first-ever load)")
    _shape_args(p)
    p.add_argument("--no-progress", action="store_true")
    _cache(p)
    _json(p)


def _profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=MODEL)
    p.add_argument("--runs", type=int, default=5, help="profiled inferences after a warm-up one (default 5)")
    p.add_argument("--trace", metavar="FILE.json", help="record the device's trace meanwhile (every process's "
                   "jobs; the device owner's to switch on) and write it as a Chrome/Perfetto trace-event file")
    p.add_argument("--png", metavar="FILE.png", help="draw the trace as a timeline picture")
    _shape_args(p)
    _cache(p)
    _json(p)


def _bench_nop_args(p: argparse.ArgumentParser) -> None:
    _json(p)
    p.add_argument("-n", type=int, default=3000, help="jobs per latency series")
    p.add_argument("--processes", type=int, default=0, help="also run P client processes at once")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of the multi-process run")
    p.add_argument("--path", choices=("queue", "ioctl"), default="queue",
                   help="jobs through a user-mode submission queue (default) or SUBMIT/WAIT requests")


def _bench_ops_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="small layers of every kind (seconds)")
    p.add_argument("--repeat", type=int, default=10,
                   help="timed calls per layer and contender, in turns of back-to-back calls after one warm-up")
    p.add_argument("--no-litert", action="store_true", help="leave LiteRT out")
    p.add_argument("--no-ort", action="store_true", help="leave onnxruntime out")
    p.add_argument("--ort-activations", choices=("uint8", "int8"), default="uint8",
                   help="activation type of the onnxruntime models (default uint8: same values, zero points "
                        "+128; with int8, onnxruntime's x86 conv is much slower)")
    _json(p)


def _bench_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=MODEL)
    p.add_argument("--requests", type=int, help="requests in flight for throughput (default: optimal_requests)")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each measurement (default 3)")
    p.add_argument("--no-litert", action="store_true", help="skip the LiteRT comparison")
    p.add_argument("--delegate", action="store_true",
                   help="also time LiteRT with the npu external delegate (partitions on this device)")
    p.add_argument("--path", choices=("queue", "ioctl"), default="queue",
                   help="inferences through a user-mode submission queue (default) or SUBMIT requests")
    p.add_argument("--reference-loop", choices=("shared", "separate"), default="shared",
                   help="time LiteRT BUILTIN_REF in the device's latency loop (default) or in a loop of its own "
                        "(its 2-9 ms calls leave the device's path cold for the next inference)")
    # benchmark_app's names (-niter, -i, -hint, -pc) beside ours
    p.add_argument("-niter", "--iterations", type=int, metavar="N",
                   help="latency rounds and throughput inferences (instead of --seconds each)")
    p.add_argument("-i", "--input", action="extend", nargs="+", metavar="FILE.npy",
                   help="one .npy per model input, in the model's input order (random inputs when omitted)")
    p.add_argument("-hint", "--hint", choices=("latency", "throughput"),
                   help="PERFORMANCE_HINT; its OPTIMAL_NUMBER_OF_INFER_REQUESTS is then the default --requests")
    p.add_argument("-pc", "--perf-counts", action="store_true",
                   help="also print one inference's per-layer counters (PERF_COUNT)")
    p.add_argument("--no-progress", action="store_true", help="no phase lines on stderr (a terminal gets them)")
    _shape_args(p)
    _cache(p)
    _json(p)


def _library_args(what: str) -> Callable[[argparse.ArgumentParser], None]:
    """The arguments of a command printing ``what``'s library (``npu delegate``, ``npu ort-ep``)."""
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--path", action="store_true", required=True,
                       help=f"print the absolute path of {what} library (built if needed)")
    return add


def _faces_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("images", nargs="*", help="PNG files (default: astronaut.png and a made second picture)")
    p.add_argument("--out", default=".", help="directory for the annotated PNGs (default .)")
    p.add_argument("--threshold", type=float, default=0.5, help="minimum face score (default 0.5)")
    p.add_argument("--reference", action="store_true", help="also run the float model in LiteRT and compare")
    _cache(p)
    _json(p)


def _classify_args(p: argparse.ArgumentParser) -> None:
    _cache(p)
    _json(p)


def _capi_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cflags", action="store_true", help="print the compiler flags (the header's directory)")
    p.add_argument("--libs", action="store_true", help="print the linker flags (-L, -l and the rpath)")
    p.add_argument("--path", action="store_true", help="print the shared library's absolute path")
    p.add_argument("--nvdla", action="store_true",
                   help="for NVDLA's portability layer in C (nvdla_port.h) instead of the runtime (npu.h)")


def _no_args(p: argparse.ArgumentParser) -> None:
    pass


def _device_index(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a device number (0, 1, ...), not {text!r}")
    return int(text)


COMMANDS: tuple[Command, ...] = (
    Command(("info",), "describe the devices", _info_args, commands.info, one_device=False),
    Command(("smi",), "devices, utilization and processes, once (nvidia-smi style)", _smi_args, commands.smi,
            one_device=False),
    Command(("top",), "watch utilization and processes (nvtop style)", _top_args, commands.top, one_device=False),
    Command(("compile",), "compile a model into a loadable (.nlb), quantizing float models", _compile_args,
            commands.compile_, device=False),
    Command(("inspect",), "describe a loadable (checked) or a model's graph", _inspect_args, commands.inspect,
            device=False),
    Command(("fetch",), "download the model-zoo files into the cache", _fetch_args, commands.fetch, device=False),
    Command(("run",), "run a model on the device: timings, outputs, --save", _run_args, commands.run),
    Command(("profile",), "per-layer cycles and chip time of a model's inference; --trace: a Perfetto trace",
            _profile_args, commands.profile),
    Command(("bench", "nop"), "NOP job latency vs raw round trip; throughput with --processes", _bench_nop_args,
            commands.bench_nop),
    Command(("bench", "ops"), "conv/depthwise/FC layers through the chip next to LiteRT and onnxruntime",
            _bench_ops_args, commands.bench_ops),
    Command(("bench", "model"), "latency and throughput of a model, next to LiteRT", _bench_model_args,
            commands.bench_model),
    Command(("delegate",), "the LiteRT external delegate: --path prints its library (for load_delegate)",
            _library_args("the delegate"), commands.delegate, device=False),
    Command(("ort-ep",), "the ONNX Runtime plugin execution provider: --path prints its library "
            "(for register_execution_provider_library)", _library_args("the execution provider's"), commands.ort_ep,
            device=False),
    Command(("faces",), "detect faces (BlazeFace, quantized) and write PNGs with the boxes", _faces_args,
            commands.faces),
    Command(("classify",), "classify sample pictures with ResNet-8 (CIFAR-10)", _classify_args, commands.classify),
    Command(("capi",), "flags to build a C program against npu.h (or nvdla_port.h), building the library if needed",
            _capi_args, commands.capi, device=False),
    Command(("doctor",), "check what the stack needs (FUSE, state, C kernels, the device) and say how to fix it",
            _no_args, commands.doctor, one_device=False),
    Command(("demo",), "run the spine end to end and print what happens", _no_args, commands.demo),
)


def build_parser() -> argparse.ArgumentParser:
    """The ``npu`` parser: one subparser per row of :data:`COMMANDS` (two words make a group)."""
    parser = OneLineParser(prog="npu", description="The emulated NPU, from user space")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (or NPU_DEBUG=1)")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for command in COMMANDS:
        where = top
        if len(command.words) == 2:
            group = command.words[0]
            if group not in groups:
                holder = top.add_parser(group, help=f"{group}: " + ", ".join(
                    c.words[1] for c in COMMANDS if c.words[0] == group and len(c.words) == 2))
                groups[group] = holder.add_subparsers(dest="what", required=True, metavar="WHAT")
            where = groups[group]
        p = where.add_parser(command.words[-1], help=command.help, description=command.help)
        if command.device:
            p.add_argument("--devroot", help="where the device nodes are (default $NPU_DEVROOT or /dev)")
        if command.device and command.one_device:
            p.add_argument("--device", type=_device_index, metavar="N",
                           help="the device to use: an index in $NPU_VISIBLE_DEVICES' list when it is set, "
                                "else the node's number (default $NPU_DEVICE, else 0)")
        command.arguments(p)
        p.set_defaults(handler=command.run, devroot=None, device=None, parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``npu`` command; returns its exit code (0 done, 1 failed, 2 usage).
    KeyboardInterrupt, and BrokenPipeError once stdout's reader is gone, go through to the
    caller: the ``npu`` script (:mod:`npu_console`) turns them into exit 130 and 141."""
    debug, argv = debug_wanted(sys.argv[1:] if argv is None else list(argv))
    try:
        args, rest = build_parser().parse_known_args(argv)
        if rest:                         # the command's own usage line, not the top parser's
            args.parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except SystemExit as exc:            # --help (0) or a usage error (2), already printed by argparse
        return exc.code if isinstance(exc.code, int) else 2
    name = " ".join(word for word in (args.command, getattr(args, "what", None)) if word)
    if args.device is not None:
        # --device wins over the environment: the default device for this command and the
        # processes it starts (bench nop's workers), as libnpu.visible_devices reads it.
        os.environ[visible_devices.DEFAULT] = str(args.device)
    try:
        return args.handler(args)
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and stdout_reader_gone():
            raise                        # `npu ... | head`: npu_console ends the process quietly
        if debug:
            traceback.print_exc()
        message, code = _explain(exc, args)
        print(f"npu {name}: error: {message}", file=sys.stderr)
        return code


def _explain(exc: Exception, args: argparse.Namespace) -> tuple[str, int]:
    """One line for ``exc`` (no newline in it) and the exit code it means."""
    devroot = Path(args.devroot) if getattr(args, "devroot", None) else default_devroot()
    hint = device_hint(exc, devroot)
    if hint is None and isinstance(exc.__cause__ or exc.__context__, OSError):   # wrapped: Failure from OSError
        hint = device_hint(exc.__cause__ or exc.__context__, devroot)    # type: ignore[arg-type]
    if hint is not None:
        return hint, 1
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {' '.join(exc.strerror.split())}"       # not "[Errno N] ...: 'path'"
    if isinstance(exc, commands.USAGE_ERRORS):
        return text, 2
    if isinstance(exc, commands.FAILURES):
        return text, 1
    return f"unexpected {type(exc).__name__}: {text} (a bug: run again with --debug and report the traceback)", 1

if __name__ == "__main__":
    sys.exit(run_main("npu", main))
