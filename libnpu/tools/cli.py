"""``npu``: the user-side command line (device info, models, benchmarks, monitoring)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from libnpu.portability import NpuError, Session, default_devroot


def _nodes(devroot: Path) -> list[Path]:
    return sorted((p for p in devroot.glob("npu[0-9]*") if p.name[3:].isdigit()), key=lambda p: int(p.name[3:]))


def cmd_info(args) -> int:
    devroot = Path(args.devroot) if args.devroot else default_devroot()
    devices = []
    with Session(devroot) as session:
        for node in _nodes(devroot):
            try:
                info = session.open(int(node.name[3:])).info()
            except OSError as exc:
                print(f"{node}: {exc}", file=sys.stderr)
                continue
            devices.append({
                "device": node.name, "node": str(node), "model": info["model"],
                "abi_version": f"{info['abi_version'] >> 16}.{info['abi_version'] & 0xFFFF}",
                "cores": info["num_cores"], "clock_mhz": info["clock_mhz"],
                "memory_total_bytes": info["memory_total"], "memory_used_bytes": info["memory_used"],
                "contexts": info["num_contexts"] - 1,          # not counting this query's own
                "jobs_completed": info["jobs_completed"], "jobs_failed": info["jobs_failed"],
                "busy_time_us": info["busy_time_ns"] // 1000, "reset_count": info["reset_count"],
            })
    if args.json:
        print(json.dumps({"devroot": str(devroot), "devices": devices}, indent=2))
    else:
        if not devices:
            print(f"no NPU devices under {devroot}")
        for d in devices:
            print(f"{d['device']}: {d['model']} abi {d['abi_version']}, {d['cores']} cores @ {d['clock_mhz']} MHz, "
                  f"memory {d['memory_used_bytes'] >> 20}/{d['memory_total_bytes'] >> 20} MiB, "
                  f"{d['contexts']} contexts, {d['jobs_completed']} jobs done ({d['jobs_failed']} failed), "
                  f"busy {d['busy_time_us'] / 1e6:.3f} s, {d['reset_count']} resets")
    return 0 if devices else 1


def cmd_bench_nop(args) -> int:
    from libnpu.tools import bench
    devroot = Path(args.devroot) if args.devroot else default_devroot()
    result = bench.nop_latency(devroot, args.n)
    if args.processes:
        result.update(bench.nop_throughput(devroot, args.processes, args.seconds))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"NOP job, submit+wait in one round trip (libnpu run): p50 {result['nop_p50_us']} us, "
          f"p99 {result['nop_p99_us']} us")
    print(f"NOP job, submit then wait (two round trips):      p50 {result['nop_submit_wait_p50_us']} us, "
          f"p99 {result['nop_submit_wait_p99_us']} us")
    print(f"raw GET_INFO round trip on the node (no libnpu):   p50 {result['rtt_p50_us']} us")
    print(f"ratio nop/rtt: {result['ratio']} (two round trips: {result['ratio_submit_wait']})")
    if args.processes:
        print(f"{result['processes']} processes for {result['seconds']} s: {result['jobs_per_s']} jobs/s, "
              f"completed {result['completed']}, errors {result['errors']}, "
              f"Jain fairness {result['jain_fairness']}")
    return 0


def cmd_smi(args, rest) -> int:
    from libnpu.tools.smi import smi_main
    return smi_main(rest)


def cmd_top(args, rest) -> int:
    from libnpu.tools.smi import top_main
    return top_main(rest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="npu", description="The emulated NPU, from user space")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="describe the devices")
    info.add_argument("--devroot")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="what", required=True)
    nop = bench_sub.add_parser("nop", help="NOP job latency vs raw round trip; throughput with --processes")
    nop.add_argument("--devroot")
    nop.add_argument("--json", action="store_true")
    nop.add_argument("-n", type=int, default=3000, help="jobs per latency series")
    nop.add_argument("--processes", type=int, default=0, help="also run P client processes at once")
    nop.add_argument("--seconds", type=float, default=3.0, help="duration of the multi-process run")
    nop.set_defaults(func=cmd_bench_nop)

    ops = bench_sub.add_parser("ops", add_help=False,
                               help="conv/depthwise/FC layers through the chip next to LiteRT (npu bench ops --help)")
    ops.set_defaults(func=lambda a, rest: __import__("libnpu.tools.ops_bench", fromlist=["main"]).main(rest),
                     passthrough=True)

    from libnpu.tools.commands import add_commands
    add_commands(sub, bench_sub)

    demo = sub.add_parser("demo", help="run the spine end to end and print what happens")
    demo.add_argument("--devroot")
    demo.set_defaults(func=lambda a: __import__("libnpu.tools.demo", fromlist=["run"]).run(
        Path(a.devroot) if a.devroot else default_devroot()))

    for name, func in (("smi", cmd_smi), ("top", cmd_top)):
        p = sub.add_parser(name, help=f"npu {name} (see npu {name} -- --help)", add_help=False)
        p.set_defaults(func=func, passthrough=True)

    args, rest = parser.parse_known_args(argv)
    if getattr(args, "passthrough", False):
        return args.func(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.func(args)
    except NpuError as exc:
        print(f"npu: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
