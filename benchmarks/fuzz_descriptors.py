"""Acceptance script: hostile task descriptors for the chip's newer compute opcodes
(0x30..0x3B math, 0x50..0x58 reductions, matmul, transpose-conv, gather, arg-max/min; 0x62 LSTM).

Run from the repository root (not in CI)::

    .venv/bin/python -m benchmarks.fuzz_descriptors [--jobs 20000] [--seed 1] [--json]

Each job is one descriptor: a valid template of its opcode (small shapes over random
data in a 16 MiB context) with one to three fields replaced by a hostile value (0, 1,
2^31, 2^32 - 1, -2^31, addresses outside or straddling the mapping, NaN and infinite
scales, random flag bits, random index tables), or a random body, a header whose size
field lies, a truncated descriptor. The jobs run on the
real job executor and DMA engine (IOMMU-checked) in this process, under an address-space
limit so that a descriptor asking for gigabytes cannot take the host down. Checked:

- every job ends 0, EINVAL or EFAULT: EIO would be an unexpected exception in a kernel
  (a bug the chip's log shows with its traceback);
- no job's working memory (numpy's allocations, traced) exceeds ``--work-limit`` MiB:
  the chip's kernels size their scratch from the operands they read, never from a
  field alone;
- after every hostile job a known-good job of the same opcode still gives its result.

Prints jobs/s and the status histogram per opcode; exit status 0 when every check held.
"""
from __future__ import annotations

import argparse
import errno
import json
import random
import resource
import struct
import sys
import tempfile
import time
import tracemalloc
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from npu_hw import iommu, ops, tasks
from tests.support.chip_memory import ChipMemory, encode

MEMORY_BYTES = 16 << 20
DATA_BYTES = 1 << 20
ADDRESS_LIMIT = 3 << 30        # the whole process: a runaway allocation fails instead of swapping
ALLOWED = {0, -errno.EINVAL, -errno.EFAULT}

OPCODES = [*range(ops.OP_PRELU, ops.OP_LOG_SOFTMAX + 1), *range(ops.OP_SUM, ops.OP_ARG_MIN + 1),
           ops.OP_UNIDIRECTIONAL_SEQUENCE_LSTM]


def _r(shape) -> list[int]:
    return list(shape) + [0] * (ops.MAX_RANK - len(shape))


class Rig:
    """A context's memory: random int8 data, a table of in-range indices, an output area."""

    def __init__(self, bus: Path):
        self.mem = ChipMemory(bus, MEMORY_BYTES)
        rng = np.random.default_rng(0)
        self.data = self.mem.put(rng.integers(-128, 128, DATA_BYTES, dtype=np.int8))
        self.indices = self.mem.put(np.array([0, 2, 1, 2], np.int32))
        self.per_channel = self.mem.put(np.full(64, 1 << 30, np.int32))
        self.zero_shift = self.mem.put(np.zeros(64, np.int32))
        self.out = self.mem.alloc(DATA_BYTES)
        self.cmd_at = self.mem._next
        self.inputs = self.mem.bytes[:self.out - iommu.IOVA_BASE].copy()

    def restore(self) -> None:
        """The inputs as they were and a zeroed output area (hostile jobs may write anywhere mapped)."""
        at = self.out - iommu.IOVA_BASE
        self.mem.bytes[:at] = self.inputs
        self.mem.bytes[at:at + DATA_BYTES] = 0
        self.end = iommu.IOVA_BASE + MEMORY_BYTES

    def run(self, descriptor: bytes):
        self.mem._next = self.cmd_at          # command buffers reuse one slot
        return self.mem.run(descriptor)


def templates(rig: Rig) -> dict[int, tuple[str, int, dict]]:
    """A valid descriptor of each opcode: (name, flags, fields)."""
    x, out = rig.data, rig.out
    binary = dict(input1=x, input2=x + 4096, output=out, rank=3, in1_shape=_r((2, 3, 4)),
                  in2_shape=_r((1, 3, 1)), out_shape=_r((2, 3, 4)))
    requant = dict(left_shift=7, input1_multiplier=1 << 30, input1_shift=0, input2_multiplier=1 << 30,
                   input2_shift=0, output_multiplier=1 << 30, output_shift=0)
    flat = dict(input=x, output=out, count=300, input_zp=0, output_zp=0)
    rows = dict(input=x, output=out, rows=3, depth=17)
    ranked = dict(input=x, output=out, rank=3, in_shape=_r((2, 5, 4)))
    reduce = dict(ranked, axes_mask=0b010)
    conv = dict(input=x, weights=x + 8192, output=out, in_shape=(1, 3, 3, 2), out_shape=(1, 6, 6, 3),
                filter_hw=(2, 2), stride=(2, 2), dilation=(1, 1), cin_per_group=2, multiplier=1 << 30,
                act_min=-128, act_max=127, mult_iova=rig.per_channel, shift_iova=rig.zero_shift)
    return {
        ops.OP_PRELU: ("PRELU", 0, {**binary, "output_multiplier_1": 1 << 30, "output_multiplier_2": 1 << 30}),
        ops.OP_HARD_SWISH: ("HARD_SWISH", 0, {**flat, "output_multiplier": 1 << 14, "output_shift": -1,
                                              "reluish_multiplier": 1 << 14, "reluish_shift": 0}),
        ops.OP_LEAKY_RELU: ("LEAKY_RELU", 0, {**flat, "multiplier_identity": 1 << 30, "multiplier_alpha": 1 << 28}),
        ops.OP_SQUARED_DIFFERENCE: ("SQUARED_DIFFERENCE", 0, {**binary, **requant}),
        ops.OP_SUB: ("SUB", 0, {**binary, **requant, "act_min": -128, "act_max": 127}),
        ops.OP_MAXIMUM: ("MAXIMUM", 0, binary),
        ops.OP_MINIMUM: ("MINIMUM", 0, binary),
        ops.OP_RSQRT: ("RSQRT", 0, {**flat, "multiplier": 1 << 30, "shift": 0}),
        ops.OP_ABS: ("ABS", 0, {**flat, "rescale": 1, "multiplier": 1 << 30}),
        ops.OP_DIV: ("DIV", 0, {**binary, "output_multiplier": 1 << 30, "act_min": -128, "act_max": 127}),
        ops.OP_L2_NORMALIZATION: ("L2_NORMALIZATION", 0, {**rows, "input_zp": 0}),
        ops.OP_LOG_SOFTMAX: ("LOG_SOFTMAX", 0, {**rows, "input_multiplier": 1 << 30, "input_left_shift": 20,
                                                "reverse_scaling_divisor": 1 << 30,
                                                "reverse_scaling_right_shift": 1, "diff_min": -1000}),
        ops.OP_SUM: ("SUM", 0, {**reduce, "multiplier": 1 << 30, "shift": 0}),
        ops.OP_REDUCE_MAX: ("REDUCE_MAX", 0, reduce),
        ops.OP_REDUCE_MIN: ("REDUCE_MIN", 0, reduce),
        ops.OP_REDUCE_L2: ("REDUCE_L2", 0, {**reduce, "scale": 0.5}),
        ops.OP_BATCH_MATMUL: ("BATCH_MATMUL", 0, dict(lhs=x, rhs=x + 4096, output=out, rank=3,
                                                      lhs_shape=_r((2, 3, 4)), rhs_shape=_r((1, 4, 5)),
                                                      multiplier=1 << 30, act_min=-128, act_max=127)),
        ops.OP_TRANSPOSE_CONV: ("TRANSPOSE_CONV", 0, conv),
        ops.OP_GATHER: ("GATHER", 0, dict(input=x, output=out, indices_iova=rig.indices, outer=2, axis_size=3,
                                          inner=5, count=4)),
        ops.OP_ARG_MAX: ("ARG_MAX", 0, {**ranked, "axis": 1}),
        ops.OP_ARG_MIN: ("ARG_MIN", ops.OPF_INDEX_INT64, {**ranked, "axis": 2}),
        ops.OP_UNIDIRECTIONAL_SEQUENCE_LSTM: ("UNIDIRECTIONAL_SEQUENCE_LSTM", 0, dict(
            input=x, output=out, input_weights=x + 4096, recurrent_weights=x + 8192, biases=x + 12288,
            output_state_in=x + 16384, cell_state_in=x + 20480, output_state_out=out + 4096,
            cell_state_out=out + 8192, steps=3, batch=2, n_input=4, n_cell=5, multipliers=[1 << 30] * 8,
            shifts=[-12] * 8, cell_shift=-11, hidden_multiplier=1 << 30, hidden_shift=-8)),
    }


U32 = [0, 1, 2, 3, 7, 255, 4096, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 32) - 1]
I32 = [-(1 << 31), -65536, -129, -32, -1, 0, 1, 31, 32, 127, 128, (1 << 31) - 1]
F64 = [float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e308, 5e-324]


def hostile_value(rig: Rig, dtype: np.dtype, rng: random.Random):
    """A value for one scalar field of ``dtype`` an attacker would try."""
    if dtype == np.dtype("<u8"):
        return rng.choice([0, 1, iommu.IOVA_BASE - 1, rig.end - 1, rig.end - 8, rig.end, (1 << 64) - 1, 1 << 63,
                           rig.data + rng.randrange(DATA_BYTES), rig.out + 1, rng.getrandbits(64)])
    if dtype.kind == "u":
        return rng.choice(U32) if rng.random() < 0.8 else rng.getrandbits(32)
    if dtype.kind == "i":
        return rng.choice(I32) if rng.random() < 0.8 else rng.getrandbits(32) - (1 << 31)
    return rng.choice(F64) if rng.random() < 0.8 else rng.uniform(-1e9, 1e9)


def mutate(rig: Rig, name: str, flags: int, fields: dict, rng: random.Random) -> bytes:
    """The template with one to three fields (or array entries) made hostile, or a random body."""
    task = tasks.TASK_BY_NAME[name]
    record = np.frombuffer(bytearray(encode(name, flags, **fields)), task.dtype)[0]
    roll = rng.random()
    if roll < 0.05:                              # a random body behind a valid header
        raw = bytearray(record.tobytes())
        raw[8:] = rng.randbytes(len(raw) - 8)
        return bytes(raw)
    if roll < 0.08:                              # a header whose size lies, or a truncated descriptor
        raw = bytearray(record.tobytes())
        if rng.random() < 0.5:
            struct.pack_into("<H", raw, 2, rng.choice((0, 8, task.size - 8, task.size + 8, 0xFFFF)))
            return bytes(raw)
        return bytes(raw[:rng.randrange(0, len(raw), 8)])
    layout: dict = dict(task.dtype.fields or {})
    names = [n for n in layout if n not in ("opcode", "size")]
    for _ in range(rng.randint(1, 3)):
        field = rng.choice(names)
        if field == "flags":
            record["flags"] = rng.getrandbits(8) if rng.random() < 0.8 else rng.getrandbits(32)
            continue
        base, shape = layout[field][0].base, layout[field][0].shape
        if shape:
            record[field][rng.randrange(shape[0])] = hostile_value(rig, base, rng)
        else:
            record[field] = hostile_value(rig, base, rng)
    return record.tobytes()


class Fuzzer:
    def __init__(self, bus: Path, seed: int, work_limit: int):
        self.rig = Rig(bus)
        self.rng = random.Random(seed)
        self.work_limit = work_limit
        self.templates = templates(self.rig)
        self.expected = {}
        for opcode in self.templates:
            self.expected[opcode] = self._good(opcode)
        self.statuses: dict[str, Counter] = defaultdict(Counter)
        self.failures: list[str] = []

    def _good(self, opcode: int) -> bytes:
        name, flags, fields = self.templates[opcode]
        self.rig.restore()
        result = self.rig.run(encode(name, flags, **fields))
        if result.status != 0:
            raise AssertionError(f"template of {name} fails with {result.status}")
        return self.rig.mem.bytes[self.rig.out - iommu.IOVA_BASE:][:4096].tobytes()

    def one(self, opcode: int) -> None:
        name, flags, fields = self.templates[opcode]
        descriptor = mutate(self.rig, name, flags, fields, self.rng)
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = self.rig.run(descriptor)
        peak = tracemalloc.get_traced_memory()[1] - before
        self.statuses[name][errno.errorcode.get(-result.status, "OK") if result.status else "OK"] += 1
        if result.status not in ALLOWED:
            self.failures.append(f"{name}: status {result.status} for {descriptor.hex()}")
        if peak > self.work_limit:
            self.failures.append(f"{name}: {peak >> 20} MiB of working memory for {descriptor.hex()}")
        if result.status != 0:
            if self._good(opcode) != self.expected[opcode]:
                self.failures.append(f"{name}: a good job after {descriptor.hex()} gives another result")


def run(jobs: int, seed: int, work_limit_mib: int) -> dict:
    """Fuzz ``jobs`` descriptors round-robin over the opcodes; the summary (``failures``: what broke)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = ADDRESS_LIMIT if hard == resource.RLIM_INFINITY else min(hard, ADDRESS_LIMIT)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    tracemalloc.start()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="npu-fuzz-desc-") as bus:
            fuzzer = Fuzzer(Path(bus), seed, work_limit_mib << 20)
            for k in range(jobs):
                fuzzer.one(OPCODES[k % len(OPCODES)])
    finally:
        tracemalloc.stop()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    elapsed = time.monotonic() - started
    return {"jobs": jobs, "seed": seed, "jobs_per_s": round(jobs / elapsed, 1),
            "statuses": {k: dict(v) for k, v in sorted(fuzzer.statuses.items())},
            "failures": fuzzer.failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-limit", type=int, default=256, metavar="MIB",
                        help="most working memory one job may take (default 256 MiB: 16x the context's memory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    summary = run(args.jobs, args.seed, args.work_limit)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"{summary['jobs']} descriptors, {summary['jobs_per_s']} jobs/s, seed {summary['seed']}")
        for name, counts in summary["statuses"].items():
            print(f"  {name:20s} " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        for failure in summary["failures"][:50]:
            print("FAIL", failure)
        print("PASS" if not summary["failures"] else f"{len(summary['failures'])} failures")
    return 0 if not summary["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
