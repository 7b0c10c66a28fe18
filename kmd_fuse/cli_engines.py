"""``npu-kmd cdi``, ``device-plugin``, ``slurm-gres`` and ``slurm-task-prolog``: the
devices handed to container runtimes, Kubernetes and Slurm (docs/fleets.md)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

from kmd_fuse import cdi, paths, slurm
from kmd_fuse.cli_errors import count_argument
from kmd_fuse.served_devices import device_numbers, served_devices, sysroot_for

DEFAULT_SPEC = "/etc/cdi/npu-emu.json"


def write_cdi(args) -> int:
    """Write the CDI spec of the devroot's devices (``-``: print it)."""
    root = paths.devroot(args.devroot)
    devices = served_devices(root, sysroot_for(root, args.sysroot))
    if not devices:
        print(f"npu-kmd cdi: no devices served under {root} (`npu-kmd start --devroot {root}` first)",
              file=sys.stderr)
        return 1
    try:
        spec = cdi.cdi_spec(devices, args.container_devroot, args.kind)
    except ValueError as exc:
        print(f"npu-kmd cdi: --kind {exc}", file=sys.stderr)
        return 2
    if args.output == "-":
        json.dump(spec, sys.stdout, indent=2)
        print()
        return 0
    cdi.write_spec(spec, Path(args.output))
    names = [cdi.qualified_name(d.index, args.kind) for d in devices]
    print(f"{args.output}: {', '.join(names)} and {args.kind}=all")
    return 0


def device_plugin(args) -> int:
    """Serve the Kubernetes device plugin until SIGTERM or Ctrl-C."""
    # imported here: grpc costs every other npu-kmd command ~0.1 s and is needed only here
    from kmd_fuse.device_plugin import plugin as dp

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    root = paths.devroot(args.devroot)
    plugin_dir = Path(args.plugin_dir)
    if not plugin_dir.is_dir():
        print(f"npu-kmd device-plugin: {plugin_dir}: no such directory (the kubelet's device-plugins "
              f"directory; give --plugin-dir)", file=sys.stderr)
        return 1
    plugin = dp.NpuDevicePlugin(root, sysroot_for(root, args.sysroot), shared=args.shared_dev_num,
                                poll_s=args.poll_interval, container_devroot=args.container_devroot)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: plugin.stopping.set())    # serve() then stops the streams
    dp.serve(plugin, plugin_dir)
    return 0


def slurm_gres(args) -> int:
    """Print gres.conf's lines for the devroot's devices."""
    root = paths.devroot(args.devroot)
    indices = device_numbers(sysroot_for(root, args.sysroot))
    if not indices:
        print(f"npu-kmd slurm-gres: no devices served under {root}", file=sys.stderr)
        return 1
    sys.stdout.write(slurm.gres_conf(root, indices, args.node_name))
    return 0


def slurm_task_prolog(args) -> int:
    """Slurm's TaskProlog: print the exports that give the task the job's devices."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        print("npu-kmd slurm-task-prolog: SLURM_JOB_ID is not set (Slurm runs this as TaskProlog)", file=sys.stderr)
        return 1
    root = paths.devroot(args.devroot)
    sys.stdout.write(slurm.task_prolog_lines(job_id, root, device_numbers(sysroot_for(root, args.sysroot))))
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.01 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} s: must be between 0.01 and 3600")
    return value


def add_parsers(sub) -> dict:
    """Add the commands to ``npu-kmd``'s subparsers; their handlers by name."""
    for name in ("cdi", "device-plugin", "slurm-gres", "slurm-task-prolog"):
        p = sub.add_parser(name)
        p.add_argument("--devroot", default=None, help="directory of the nodes (default $NPU_DEVROOT or /dev)")
        p.add_argument("--sysroot", default=None, help="root of the attribute tree (default: what start recorded)")
        if name == "slurm-gres":
            p.add_argument("--node-name", help="NodeName= on each line (a gres.conf shared by several nodes)")
        if name.startswith("slurm"):
            continue
        p.add_argument("--container-devroot", default=cdi.CONTAINER_DEVROOT,
                       help="where the nodes appear inside a container (default %(default)s)")
        if name == "cdi":
            p.add_argument("-o", "--output", default=DEFAULT_SPEC,
                           help="spec file to write, '-' for standard output (default %(default)s)")
            p.add_argument("--kind", default=cdi.KIND,
                           help="the devices' CDI kind, vendor/class (default %(default)s; one per devroot)")
        else:
            p.add_argument("--plugin-dir", default="/var/lib/kubelet/device-plugins",
                           help="the kubelet's device plugin directory, holding kubelet.sock (default %(default)s)")
            p.add_argument("--shared-dev-num", type=count_argument, default=1,
                           help="IDs advertised per device: that many containers may share one (default 1)")
            p.add_argument("--poll-interval", type=_seconds, default=1.0,
                           help="seconds between two looks at the devices' health (default %(default)s)")
    return {"cdi": write_cdi, "device-plugin": device_plugin, "slurm-gres": slurm_gres,
            "slurm-task-prolog": slurm_task_prolog}
