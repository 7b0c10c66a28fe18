"""Issue 28's Ray acceptance (not CI): a real two-node Ray cluster on loopback (head on
127.0.0.2, worker on 127.0.0.3), each node with a devroot of its own and advertising
``npu_emu`` (libnpu.ray_devices); ``--tasks`` tasks asking for one ``npu_emu`` each run
ResNet-8 on the device they claimed (benchmarks/fleet_job.py: byte-identical to LiteRT's
BUILTIN_REF, devices held until every task has started), then an actor holding a device
runs ``--inferences`` inferences. Prints each task's node and device, the actor's p50,
and the times of the cluster's start and the tasks.

Ray is pip-installed into the venv if missing (``ray==2.60.*``). Everything is private to
the run: ports 16379+, Ray's temp dir and the devroots in a temporary directory; the
``ray start --block`` processes are ended at the end (never ``ray stop``: it stops every
Ray of the machine).

Run: ``python -m benchmarks.ray_acceptance [--tasks 4] [--devices-per-node 2]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import libnpu
from benchmarks.fleet_job import run_job
from libnpu import model_zoo
from libnpu.compiler.lower import compile_model
from libnpu.portability import Device
from libnpu.ray_devices import RESOURCE, claimed_device
from tests.support.device import REPO, fetch_model

NODES = ("127.0.0.2", "127.0.0.3")
PORT = 16379
WAIT_S = 180.0


def install() -> float:
    """pip install ray if missing; the seconds it took (0 if nothing to do)."""
    try:
        import ray  # noqa: F401  (only whether it is there)
        return 0.0
    except ImportError:
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "ray==2.60.*"], check=True)
        return time.monotonic() - started


def ray_job(nlb: str, tflite: str, barrier: str, count: int, name: str) -> dict:
    """A Ray task's body: claim a device of its node, run the fleet job on it."""
    with claimed_device():
        result = run_job(nlb, tflite, barrier, count, name)
    result["node"] = os.environ.get("NPU_RAY_NODE", "?")
    return result


class DeviceActor:
    """An actor holding one device for its life (a serving replica)."""

    def __init__(self, nlb: str) -> None:
        self._claim = claimed_device()
        number = self._claim.__enter__()
        self.where = (os.environ.get("NPU_RAY_NODE", "?"), number)
        self.device = Device(Path(os.environ["NPU_DEVROOT"]) / f"npu{number}", number)
        self.model = libnpu.load(nlb, self.device)
        self.x = np.zeros(self.model.inputs[0].shape, dtype=np.int8)

    def infer_times(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            self.model.infer([self.x])
            times.append(time.perf_counter() - started)
        return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--devices-per-node", type=int, default=2)
    parser.add_argument("--inferences", type=int, default=200)
    args = parser.parse_args(argv)
    installed_s = install()
    import ray  # after install(): absent until then

    home = Path(tempfile.mkdtemp(prefix="npu-ray-"))
    kmd = [sys.executable, "-m", "kmd_fuse.cli"]
    devroots = [home / f"node{i}" / "dev" for i in range(len(NODES))]
    nodes: list[subprocess.Popen] = []
    try:
        for devroot in devroots:
            devroot.mkdir(parents=True)
            subprocess.run([*kmd, "start", "--devices", str(args.devices_per_node), "--devroot", str(devroot)],
                           check=True, capture_output=True, timeout=300)
        tflite = fetch_model(model_zoo.resnet8_cifar10)
        nlb = home / "resnet8.nlb"
        compile_model(tflite).save(nlb)
        (home / "barrier").mkdir()
        started = time.monotonic()
        for i, (ip, devroot) in enumerate(zip(NODES, devroots)):
            env = {**os.environ, "NPU_DEVROOT": str(devroot), "NPU_RAY_NODE": ip,
                   "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
            where = ["--head", f"--port={PORT}", f"--temp-dir={home}/ray", "--include-dashboard=false",
                     f"--ray-client-server-port={PORT + 1}", f"--node-manager-port={PORT + 2}",
                     f"--object-manager-port={PORT + 3}", "--min-worker-port=16400", "--max-worker-port=16499"] \
                if i == 0 else [f"--address={NODES[0]}:{PORT}", f"--node-manager-port={PORT + 4 + i}",
                                f"--object-manager-port={PORT + 8 + i}", "--min-worker-port=16500",
                                "--max-worker-port=16599"]
            nodes.append(subprocess.Popen(
                [str(Path(sys.executable).parent / "ray"), "start", "--block", f"--node-ip-address={ip}",
                 "--num-cpus=2", f"--resources={json.dumps({RESOURCE: args.devices_per_node})}", *where],
                env=env, cwd=REPO, stdout=open(home / f"node{i}.log", "wb"), stderr=subprocess.STDOUT,
                start_new_session=True))
            if i == 0:
                deadline = time.monotonic() + WAIT_S
                while not list((home / "ray").glob("session_latest")):
                    if time.monotonic() > deadline or nodes[0].poll() is not None:
                        raise RuntimeError(f"the head did not start: {(home / 'node0.log').read_text()[-2000:]}")
                    time.sleep(0.2)   # the poll interval
        ray.init(address=f"{NODES[0]}:{PORT}", _node_ip_address=NODES[0], logging_level="ERROR")
        deadline = time.monotonic() + WAIT_S
        while ray.cluster_resources().get(RESOURCE, 0) < len(NODES) * args.devices_per_node:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster resources: {ray.cluster_resources()}")
            time.sleep(0.2)           # the poll interval
        up_s = time.monotonic() - started

        started = time.monotonic()
        task = ray.remote(num_cpus=0, resources={RESOURCE: 1})(ray_job)
        results = ray.get([task.remote(str(nlb), str(tflite), str(home / "barrier"), args.tasks, f"task-{i}")
                           for i in range(args.tasks)], timeout=600)
        tasks_s = time.monotonic() - started
        print(f"{'task':<8} {'node':<10} {'device':>6} {'identical':>9} {'infer ms':>9}")
        for r in results:
            print(f"{r['job']:<8} {r['node']:<10} {'npu' + str(r['device']):>6} {str(r['identical']):>9} "
                  f"{r['infer_ms']:>9}")
        placed = {(r["node"], r["device"]) for r in results}

        actor = ray.remote(num_cpus=0, resources={RESOURCE: 1})(DeviceActor).remote(str(nlb))
        times = ray.get(actor.infer_times.remote(args.inferences), timeout=600)
        where = ray.get(actor.__ray_call__.remote(lambda self: self.where))
        p50 = statistics.median(times) * 1e3
        ok = len(placed) == args.tasks and all(r["identical"] for r in results)
        print(f"actor on {where[0]} npu{where[1]}: {args.inferences} inferences, p50 {p50:.2f} ms")
        print(f"install {installed_s:.1f} s (0: already there), 2 nodes up in {up_s:.1f} s, {args.tasks} tasks in "
              f"{tasks_s:.1f} s; distinct (node, device): {len(placed)} of {args.tasks}; {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc in reversed(nodes):
            os.killpg(proc.pid, signal.SIGTERM)      # the session of the `ray start` we started
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for devroot in devroots:
            subprocess.run([*kmd, "stop", "--devroot", str(devroot)], capture_output=True, timeout=300)
        if str(home) not in Path("/proc/self/mounts").read_text():
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
