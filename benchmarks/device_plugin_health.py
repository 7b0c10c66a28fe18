"""How long a stopped device takes to show Unhealthy in the device plugin's ListAndWatch,
and what an Allocate costs, measured from the kubelet's side (tests/support/kubelet.py).

Per round: ``npu-kmd start --devices 2`` (restarting what the last round stopped), SIGTERM
to npu1's daemon, and the time until the plugin's stream lists npu1 Unhealthy. What it is
made of: the daemon's shutdown (it releases its pid file's lock as it exits) plus up to
one ``--poll-interval`` of the plugin. Prints every round, the median and the maximum per
poll interval, and the median of ``--allocates`` Allocate round trips.

Run: ``python -m benchmarks.device_plugin_health [--rounds 5] [--poll 1.0 0.2] [--allocates 200]``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kmd_fuse import paths, pidfile
from kmd_fuse.device_plugin import deviceplugin_pb2 as api
from tests.support.kubelet import KubeletSide, PluginClient, start_plugin, stop_plugin


def kmd(devroot: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "kmd_fuse.cli", *args, "--devroot", str(devroot)], check=True,
                   capture_output=True, timeout=300)


def measure(devroot: Path, poll: float, rounds: int, allocates: int) -> tuple[list[float], float]:
    """(seconds to Unhealthy per round, median Allocate seconds) with one plugin process."""
    kmd(devroot, "start", "--devices", "2")
    plugin_dir = Path(tempfile.mkdtemp(prefix="npu-dp-"))
    took: list[float] = []
    with KubeletSide(plugin_dir) as kubelet:
        proc = start_plugin(devroot, plugin_dir, "--poll-interval", str(poll))
        client = None
        try:
            kubelet.registered()
            client = PluginClient(plugin_dir)
            request = api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=["npu0"])])
            calls = []
            for _ in range(allocates):
                started = time.perf_counter()
                client.stub.Allocate(request)
                calls.append(time.perf_counter() - started)
            for _ in range(rounds):
                kmd(devroot, "start", "--devices", "2")
                client.wait_for_list(lambda d: d == {"npu0": "Healthy", "npu1": "Healthy"})
                started = time.perf_counter()
                os.kill(pidfile.running_pid(paths.pid_file(devroot, 1)) or 0, signal.SIGTERM)
                client.wait_for_list(lambda d: d.get("npu1") == "Unhealthy")
                took.append(time.perf_counter() - started)
        finally:
            if client is not None:
                client.close()
            stop_plugin(proc)
            shutil.rmtree(plugin_dir, ignore_errors=True)
    return took, statistics.median(calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--poll", type=float, nargs="+", default=[1.0, 0.2], help="poll intervals to compare")
    parser.add_argument("--allocates", type=int, default=200)
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="npu-dp-bench-"))
    devroot = home / "dev"
    devroot.mkdir()
    try:
        print(f"{'poll s':>7} {'rounds (s to Unhealthy)':<40} {'median':>7} {'max':>6} {'Allocate p50':>13}")
        for poll in args.poll:
            took, allocate = measure(devroot, poll, args.rounds, args.allocates)
            rounds = " ".join(f"{t:.2f}" for t in took)
            print(f"{poll:>7.2f} {rounds:<40} {statistics.median(took):>7.2f} {max(took):>6.2f} "
                  f"{allocate * 1e3:>10.2f} ms")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        subprocess.run([sys.executable, "-m", "kmd_fuse.cli", "stop", "--devroot", str(devroot)],
                       capture_output=True, timeout=300)
        if str(devroot) not in Path("/proc/self/mounts").read_text():
            shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
