"""The attribute tree read with cat/ls/stat: the files sysfs would have, every value the
one GET_INFO reports, busy time that only grows while a job runs."""
import textwrap
import time

from tests.support.device import wait_until
from tests.support.shell import attr_dir, kv, sh

FILES = ["abi_version", "busy_time_us", "clients", "clock_mhz", "cores", "dev", "dma_bytes_per_cycle",
         "jobs_completed", "jobs_failed", "macs_per_cycle", "memory_total_bytes", "memory_used_bytes", "model",
         "pacing", "profile", "reset", "reset_count", "sram_bytes", "trace", "uevent", "uuid"]
RUN_JOB = textwrap.dedent("""
    import sys, libnpu
    with libnpu.initialize(sys.argv[1]) as s:
        d = s.open(0)
        a, b = d.alloc_mem(64 << 20), d.alloc_mem(64 << 20)
        c = d.command_buffer()
        for _ in range(int(sys.argv[2])):
            c.add("DMA_COPY", src=a.address, dst=b.address, length=64 << 20)
        print("submitted", flush=True)
        d.run(c, [a, b])
        print("busy_time_ns", d.stats()["busy_time_ns"], flush=True)
""")


def read_attrs(npu) -> dict[str, str]:
    out = sh('cd "$D"; for f in *; do [ -f "$f" ] && [ "$f" != reset ] && [ "$f" != trace ] && '
             'echo "$f=$(cat "$f")"; done', D=str(attr_dir(npu))).stdout
    return kv(out)


def test_the_tree_has_the_sysfs_files(npu):
    listing = sh('ls "$D"', D=str(attr_dir(npu))).stdout.split()
    assert listing == FILES
    modes = kv(sh('cd "$D"; for f in *; do echo "$f=$(stat -c "%A %U %s" "$f")"; done', D=str(attr_dir(npu))).stdout)
    assert modes["model"] == "-r--r--r-- root 4096"
    assert modes["reset"] == "--w------- root 4096"
    assert modes["uevent"] == "-rw-r--r-- root 4096"
    assert modes["trace"] == "-rw-r--r-- root 4096"
    assert modes["clients"].startswith("drwxr-xr-x root")
    mounts = sh("cat /proc/self/mounts").stdout
    assert f" {attr_dir(npu)} fuse.npu0 " in mounts and f" {npu.node} fuse.npu0 " in mounts


def test_values_are_what_get_info_reports(npu):
    attrs = read_attrs(npu)
    info = kv(sh('"$PY" "$FRAME" "$N" info', N=str(npu.node)).stdout)
    assert attrs["model"] == info["MODEL"] == "npu-emu"
    assert attrs["abi_version"] == "2.9" and int(info["ABI_VERSION"]) == 0x00020009
    for attr, field in [("cores", "NUM_CORES"), ("clock_mhz", "CLOCK_MHZ"), ("memory_total_bytes", "MEMORY_TOTAL"),
                        ("memory_used_bytes", "MEMORY_USED"), ("jobs_completed", "JOBS_COMPLETED"),
                        ("jobs_failed", "JOBS_FAILED"), ("reset_count", "RESET_COUNT")]:
        assert attrs[attr] == info[field], attr
    assert int(attrs["busy_time_us"]) == int(info["BUSY_TIME_NS"]) // 1000   # idle: nothing moves between reads
    # A FUSE regular file cannot carry st_rdev: `dev` and `uevent` are where the number lives.
    assert attrs["dev"] == "261:0"
    assert kv(sh('cat "$D/uevent"', D=str(attr_dir(npu))).stdout) == {"MAJOR": "261", "MINOR": "0",
                                                                      "DEVNAME": "npu0"}


def test_memory_used_follows_allocations(npu, holder_factory):
    base = int(sh('cat "$D/memory_used_bytes"', D=str(attr_dir(npu))).stdout)
    holder = holder_factory(npu.node, alloc=3 << 20)
    now = int(sh('cat "$D/memory_used_bytes"', D=str(attr_dir(npu))).stdout)
    assert now == base + (3 << 20) == int(holder.ask("info")["MEMORY_USED"])
    holder.close()
    assert wait_until(lambda: int(sh('cat "$D/memory_used_bytes"', D=str(attr_dir(npu))).stdout) == base)


def test_a_reader_that_keeps_the_file_open_sees_fresh_values(npu, holder_factory):
    # Like sysfs: reading again from offset 0 renders the value anew (watch-style monitors).
    holder = holder_factory(npu.node, alloc=1 << 20)
    with open(attr_dir(npu) / "memory_used_bytes", "rb", buffering=0) as f:
        first = int(f.read())
        assert f.read() == b""      # EOF after the value, as cat expects
        holder.close()

        def reread() -> int:
            f.seek(0)
            return int(f.read())
        assert wait_until(lambda: reread() == first - (1 << 20))


def test_busy_time_is_still_while_idle_and_grows_at_most_wall_time_while_busy(npu):
    d = str(attr_dir(npu))
    # Not a wait: the idle stretch looked at (passes however slow the machine).
    idle = sh('cat "$D/busy_time_us"; sleep 0.3; cat "$D/busy_time_us"', D=d).stdout.split()
    assert idle[0] == idle[1]
    script = textwrap.dedent('''
        t0=$(date +%s%N); b0=$(cat "$D/busy_time_us")
        grown() { [ "$(cat "$D/busy_time_us")" -gt "$b0" ]; }
        "$PY" -c "$JOB" "$R" 60 | { read -r _; n=0; until grown || [ $n -ge 6000 ]; do sleep 0.01; n=$((n+1)); done
                                    cat "$D/busy_time_us"; cat; }
        t1=$(date +%s%N); b1=$(cat "$D/busy_time_us")
        echo "wall_us=$(( (t1 - t0) / 1000 )) busy_us=$(( b1 - b0 )) b0=$b0"
    ''')
    out = sh(script, D=d, JOB=RUN_JOB, R=str(npu.devroot)).stdout.split()
    mid, job_ns = int(out[0]), int(out[2])
    fields = kv("\n".join(out[3:]))
    wall, busy, b0 = int(fields["wall_us"]), int(fields["busy_us"]), int(fields["b0"])
    assert mid > b0                       # seen growing while the job runs
    assert 0 < busy <= wall               # one job on one core: never faster than the wall clock
    assert abs(busy - job_ns // 1000) <= 1   # all of it is that context's busy time (GET_STATS)
    time.sleep(0.2)    # not a wait: a chance for a late addition to show (passes however slow)
    assert int(sh('cat "$D/busy_time_us"', D=d).stdout) == b0 + busy
