"""Issue 28's Slurm acceptance (not CI): a real slurmctld + slurmd + munged on this host,
``GresTypes=npu`` with the gres.conf ``npu-kmd slurm-gres`` writes and ``npu-kmd
slurm-task-prolog`` as TaskProlog; a job array of ``--tasks`` tasks, each ``--gres=npu:1``,
each running ResNet-8 on its device (benchmarks/fleet_job.py: byte-identical to LiteRT's
BUILTIN_REF, devices held until every task has started). Prints each task's device and
inference time, and the times of the install, the cluster's start and the array.

Installs Debian's slurm-wlm and munge if missing (apt-get). Everything else is private to
the run: its own munged (own key and socket), ports 16817/16818, state and logs in a
temporary directory, all stopped and removed at the end.

Run (root): ``python -m benchmarks.slurm_acceptance [--tasks 4]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.fleet_job import BARRIER_S
from libnpu import model_zoo
from libnpu.compiler.lower import compile_model
from tests.support.device import REPO, fetch_model

WAIT_S = 120.0


def install() -> float:
    """apt-get install slurm-wlm munge if missing; the seconds it took (0 if nothing to do)."""
    missing = [p for p in ("slurm-wlm", "munge") if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout != "install ok installed"]
    if not missing:
        return 0.0
    started = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env,
                   capture_output=True)
    return time.monotonic() - started


def wait_until(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.2)           # the poll interval


def slurm_conf(home: Path, host: str, devices: int) -> str:
    return f"""ClusterName=npuemu
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={home}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd.pid
SlurmctldLogFile={home}/slurmctld.log
SlurmdLogFile={home}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=npu
TaskProlog={home}/task-prolog
NodeName={host} NodeAddr=127.0.0.1 CPUs={max(8, devices)} Gres=npu:{devices} State=UNKNOWN
PartitionName=npu Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4, help="array tasks, and devices (default 4)")
    args = parser.parse_args(argv)
    installed_s = install()
    home = Path(tempfile.mkdtemp(prefix="npu-slurm-"))
    devroot = home / "dev"
    devroot.mkdir()
    kmd = [sys.executable, "-m", "kmd_fuse.cli"]
    env = {**os.environ, "SLURM_CONF": str(home / "slurm.conf")}
    daemons: list[subprocess.Popen] = []
    try:
        subprocess.run([*kmd, "start", "--devices", str(args.tasks), "--devroot", str(devroot)], check=True,
                       capture_output=True, timeout=300)
        tflite = fetch_model(model_zoo.resnet8_cifar10)
        nlb = home / "resnet8.nlb"
        compile_model(tflite).save(nlb)
        for sub in ("state", "spool", "barrier", "out"):
            (home / sub).mkdir()
        gres = subprocess.run([*kmd, "slurm-gres", "--devroot", str(devroot)], check=True, capture_output=True,
                              text=True).stdout
        (home / "gres.conf").write_text(gres)
        host = socket.gethostname()
        (home / "slurm.conf").write_text(slurm_conf(home, host, args.tasks))
        prolog = home / "task-prolog"
        prolog.write_text(f"#!/bin/sh\nexec {sys.executable} -m kmd_fuse.cli slurm-task-prolog --devroot {devroot}\n")
        prolog.chmod(0o755)
        key = home / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        started = time.monotonic()
        daemons.append(subprocess.Popen(
            ["munged", "-F", "--force", f"--socket={home}/munge.sock", f"--key-file={key}",
             f"--pid-file={home}/munged.pid", f"--log-file={home}/munged.log", f"--seed-file={home}/munge.seed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: (home / "munge.sock").exists(), "munged's socket")
        daemons.append(subprocess.Popen(["slurmctld", "-D", "-c", "-f", str(home / "slurm.conf")], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        daemons.append(subprocess.Popen(["slurmd", "-D", "-f", str(home / "slurm.conf")], env=env, cwd=REPO,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_until(lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                                                    text=True).stdout, "the node idle in sinfo")
        up_s = time.monotonic() - started
        started = time.monotonic()
        job = subprocess.run(
            ["sbatch", "--parsable", f"--array=0-{args.tasks - 1}", "--gres=npu:1", "--cpus-per-task=1",
             f"--output={home}/out/%a.txt", f"--chdir={REPO}",
             f"--wrap={sys.executable} -m benchmarks.fleet_job {nlb} {tflite} {home}/barrier {args.tasks}"],
            env=env, check=True, capture_output=True, text=True).stdout.strip()
        wait_until(lambda: not subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True,
                                              text=True).stdout.strip(), f"job array {job} to end",
                   timeout=BARRIER_S + WAIT_S)
        array_s = time.monotonic() - started
        results = []
        for task in range(args.tasks):
            text = (home / "out" / f"{task}.txt").read_text()
            lines = [line for line in text.splitlines() if line.startswith("{")]
            if not lines:
                print(f"task {task}: no result; its output:\n{text}")
                continue
            results.append(json.loads(lines[-1]))
        print(f"{'task':<8} {'device':>6} {'identical':>9} {'infer ms':>9}")
        for r in results:
            print(f"{r['job']:<8} {'npu' + str(r['device']):>6} {str(r['identical']):>9} {r['infer_ms']:>9}")
        devices = {r["device"] for r in results}
        ok = len(results) == args.tasks and len(devices) == args.tasks and all(r["identical"] for r in results)
        print(f"install {installed_s:.1f} s (0: already there), munged + slurmctld + slurmd up in {up_s:.1f} s, "
              f"array of {args.tasks} in {array_s:.1f} s; distinct devices: {len(devices)} of {args.tasks}; "
              f"{'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        for proc in reversed(daemons):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run([*kmd, "stop", "--devroot", str(devroot)], capture_output=True, timeout=300)
        if str(home) not in Path("/proc/self/mounts").read_text():
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
