"""clients/<id>: one DRM usage-stats file per open context, with what GET_STATS reports;
it appears with open() and goes with close()."""
import json
import subprocess
import sys
import textwrap

from kmd_fuse.uapi import usage_stats
from tests.support.device import wait_until
from tests.support.shell import attr_dir, sh


def clients(npu) -> list[str]:
    return sh('ls "$D/clients"', D=str(attr_dir(npu))).stdout.split()


def test_client_file_follows_the_context(npu, holder_factory):
    before = clients(npu)
    holder = holder_factory(npu.node, alloc=2 << 20)
    name = str(holder.context_id)
    assert clients(npu) == sorted(before + [name], key=int)
    text = sh('cat "$D/clients/$C"', D=str(attr_dir(npu)), C=name).stdout
    stats = usage_stats.parse(text)
    assert stats.driver == "npu_emu" and stats.client_id == holder.context_id
    assert stats.pid == holder.pid and stats.comm == "python"
    assert stats.pdev == "platform:npu-emu.0"
    assert stats.engine_capacity == {"npu": 2}
    ioctl = holder.ask("stats")
    assert stats.engines == {"npu": int(ioctl["BUSY_TIME_NS"])}
    assert stats.memory == {"device": {"total": 2 << 20, "resident": 2 << 20}}
    assert int(ioctl["MEMORY_ALLOCATED"]) == 2 << 20
    assert stats.extra["npu_emu-buffers"] == ioctl["BUFFERS"] == "1"
    assert stats.extra["npu_emu-jobs-submitted"] == ioctl["JOBS_SUBMITTED"]
    owner = sh('stat -c "%a %u" "$D/clients/$C"', D=str(attr_dir(npu)), C=name).stdout.split()
    assert owner == ["444", "0"]
    holder.close()     # the kernel sends FUSE's release after close() returns: allow it a moment
    assert wait_until(lambda: clients(npu) == before)
    gone = sh('cat "$D/clients/$C"', D=str(attr_dir(npu)), C=name, check=False)
    assert gone.returncode == 1 and "No such file or directory" in gone.stderr


def test_engine_time_counts_the_contexts_jobs(npu):
    job = textwrap.dedent("""
        import sys, libnpu
        with libnpu.initialize(sys.argv[1]) as s:
            d = s.open(0)
            a, b = d.alloc_mem(16 << 20), d.alloc_mem(16 << 20)
            c = d.command_buffer()
            for _ in range(10):
                c.add("DMA_COPY", src=a.address, dst=b.address, length=16 << 20)
            d.run(c, [a, b])
            d.run(c, [a, b])
            print(d.info()["context_id"], d.stats()["busy_time_ns"], flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", job, str(npu.devroot)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        cid, busy_ns = proc.stdout.readline().split()
        text = sh('cat "$D/clients/$C"', D=str(attr_dir(npu)), C=cid).stdout
        stats = usage_stats.parse(text)
        assert stats.engines["npu"] == int(busy_ns) > 0
        assert stats.extra["npu_emu-jobs-completed"] == "2"
        assert stats.memory["device"]["total"] >= 32 << 20
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert wait_until(lambda: cid not in clients(npu))


def test_one_file_per_open_file(npu):
    # Two opens by one shell are two contexts: two client files with the shell's pid, gone at close.
    script = textwrap.dedent("""
        exec 3<>"$N" 4<>"$N"
        echo "me=$$"
        echo "open=$(ls "$D/clients" | tr '\\n' ' ')"
        for c in "$D"/clients/*; do echo "pid=$(awk '/^pid:/ {print $2}' "$c")"; done
    """)
    lines = sh(script, N=str(npu.node), D=str(attr_dir(npu))).stdout.splitlines()
    values = {}
    for line in lines:
        key, _, value = line.partition("=")
        values.setdefault(key, []).append(value)
    me = values["me"][0]
    assert values["pid"].count(me) == 2
    mine = set(values["open"][0].split()) - set(clients(npu))   # the shell has exited: its files closed
    assert wait_until(lambda: not mine & set(clients(npu)))
    assert len(mine) <= 2


def test_npu_top_sees_the_busy_process(npu):
    job = textwrap.dedent("""
        import sys, libnpu
        with libnpu.initialize(sys.argv[1]) as s:
            d = s.open(0)
            a, b = d.alloc_mem(64 << 20), d.alloc_mem(64 << 20)
            c = d.command_buffer()
            for _ in range(4):
                c.add("DMA_COPY", src=a.address, dst=b.address, length=64 << 20)
            d.run(c, [a, b])
            print("running", flush=True)
            for _ in range(40):        # many short jobs: a context's engine time grows as each completes
                d.run(c, [a, b])
    """)
    proc = subprocess.Popen([sys.executable, "-c", job, str(npu.devroot)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "running"
        out = sh('"$PY" -m libnpu.tools top --devroot "$R" --json -n 2 -d 0.2', R=str(npu.devroot)).stdout
    finally:
        proc.wait(timeout=60)
        proc.stdout.close()
    frames = [json.loads(line) for line in out.splitlines()]
    (dev,) = frames[0]["devices"]
    assert 0 < dev["utilization_pct"] <= 100
    (row,) = [p for p in dev["processes"] if p["pid"] == proc.pid]
    assert row["comm"] == "python" and row["memory_bytes"] >= 128 << 20
    assert 0 < row["utilization_pct"] <= 100 and row["engine_ns"]["npu"] > 0
