"""Per-layer profiles of inferences (PERF_COUNT), as OpenVINO's ``get_profiling_info``, and every inference's times.

Every inference records its ``Timing`` (the wall latency, the simulated device time, the
core's own time on the job): ``request.timing``.

With the property ``PERF_COUNT`` on, each inference is submitted with
``NPU_SUBMIT_PROFILE``: the chip times every task (one task per layer of the compiled
model) and the driver hands the records back (GET_PROFILE).  ``InferenceProfile``
pairs them with the model's layers: per layer the timing model's cycles and simulated
time, the chip's measured wall time, and where it ran; per inference the queue wait
(driver accepted the job -> a core started it), the job's measured chip time and the
time from its end to its fence (pacing, the completion, the interrupt).  The layers'
cycles add up exactly to the inference's (the job's cycles are their sum), and their
measured times to nearly the job's (the rest is the chip fetching the command buffer
and binding the address space: 6% for ResNet-8).

Layers run on the host CPU (a CPU fallback) are shown with ``device == "CPU"``; the chip
reports only its own tasks. Each layer names the source model's operator it runs
(``source``, from the loadable's task metadata or the host step: the number ``npu compile
--report`` gives that operator, :mod:`libnpu.compiler.source_index`); ``index`` is its
position among the loadable's tasks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta

from libnpu.loadable import Loadable
from libnpu.portability import JobTiming
from npu_hw import ops as _ops  # noqa: F401 (registers the operators' task types, for their names)
from npu_hw import tasks as task_spec


@dataclass
class Timing:
    """The last inference's times: ``latency_s`` (wall, from the call to its end),
    ``device_time_ns`` (the simulated device's time) and ``chip_ns`` (the core's own wall
    time on the job, when the job path reports it: user-queue jobs; 0 otherwise)."""
    latency_s: float = 0.0
    device_time_ns: int = 0
    chip_ns: int = 0


@dataclass(frozen=True)
class ChipPart:
    """A chip job of an inference: its timing (GET_PROFILE) and the model task its first task is."""
    job: JobTiming
    first_task: int = 0


@dataclass(frozen=True)
class HostPart:
    """A layer the host ran (CPU fallback), timed by the host."""
    index: int
    name: str
    op: str
    start_ns: int               # CLOCK_MONOTONIC
    end_ns: int
    source: int = -1            # its operator's index in the source model (HostStep.source)


@dataclass(frozen=True)
class LayerProfile:
    index: int
    name: str
    op: str
    device: str                 # "NPU" (the chip timed it) or "CPU"
    cycles: int                 # the timing model's
    device_time_ns: int         # cycles at the chip's clock
    chip_ns: int                # measured wall time on the chip
    start_ns: int               # CLOCK_MONOTONIC
    end_ns: int
    source: int = -1            # the source model's operator it runs (``npu compile --report``'s op), -1: none
    core: int = -1              # the chip core it ran on (-1: the host's)


@dataclass(frozen=True)
class ProfilingInfo:
    """One layer as OpenVINO's ``ProfilingInfo`` describes it (``get_profiling_info()``)."""
    node_name: str
    node_type: str              # the operator
    exec_type: str              # where it ran: "NPU" or "CPU"
    status: str                 # "EXECUTED"
    real_time: timedelta        # measured wall time of the layer
    cpu_time: timedelta         # host CPU time: a CPU layer's own time, zero for an NPU layer


@dataclass
class InferenceProfile:
    """One inference's layers and totals (see the module doc)."""

    layers: list[LayerProfile]
    cycles: int
    device_time_ns: int
    chip_ns: int                # the job's measured execution on its core
    queue_ns: int               # driver accepted the job -> a core started it
    signal_ns: int              # execution ended -> fence signalled: any pacing, the completion, the interrupt
    core: int                   # the (first) chip job's core
    complete: bool              # every layer's record arrived from the chip
    clock_mhz: int
    timing: JobTiming | None = field(default=None, repr=False)    # the (last) chip job's

    @classmethod
    def from_job(cls, loadable: Loadable, job: JobTiming, clock_mhz: int) -> InferenceProfile:
        """The profile of an inference that is one job (the model's whole task list)."""
        return cls.from_parts(loadable, [ChipPart(job)], clock_mhz)

    @classmethod
    def from_parts(cls, loadable: Loadable, parts: list[ChipPart | HostPart], clock_mhz: int) -> InferenceProfile:
        """The profile of an inference run in parts, in order: chip jobs (each a partition of
        the model's tasks, from ``first_task``) and layers the host ran in between (a CPU
        fallback).  Cycles and device time are the chip jobs' sums; chip time is the sum
        of the jobs' execution; the queue wait is the sum of their waits."""
        layers: list[LayerProfile] = []
        jobs = [part.job for part in parts if isinstance(part, ChipPart)]
        for part in parts:
            if isinstance(part, HostPart):
                layers.append(LayerProfile(part.index, part.name, part.op, "CPU", 0, 0, part.end_ns - part.start_ns,
                                           part.start_ns, part.end_ns, part.source))
                continue
            for record in part.job.tasks:
                index = part.first_task + record.index
                task = loadable.tasks[index] if index < len(loadable.tasks) else None
                spec = task_spec.TASK_TYPES.get(record.opcode)
                op = task.op if task else (spec.name if spec else f"op{record.opcode:#x}")
                layers.append(LayerProfile(index, task.name if task else op, op, "NPU", record.cycles,
                                           record.cycles * 1000 // clock_mhz, record.end_ns - record.start_ns,
                                           record.start_ns, record.end_ns,
                                           int(task.meta.get("source", -1)) if task else -1, record.core))
        return cls(layers, sum(j.cycles for j in jobs), sum(j.device_time_ns for j in jobs),
                   sum(j.end_ns - j.start_ns for j in jobs), sum(j.queue_ns for j in jobs),
                   sum(max(0, j.signal_ns - j.end_ns) for j in jobs), jobs[0].core if jobs else -1,
                   all(j.complete for j in jobs), clock_mhz, jobs[-1] if jobs else None)

    def profiling_info(self) -> list[ProfilingInfo]:
        """The layers as OpenVINO's ``InferRequest.get_profiling_info()`` lists them."""
        return [ProfilingInfo(layer.name, layer.op, layer.device, "EXECUTED",
                              timedelta(microseconds=layer.chip_ns / 1e3),
                              timedelta(microseconds=layer.chip_ns / 1e3 if layer.device == "CPU" else 0))
                for layer in self.layers]

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("timing", "layers")}
        out["layers"] = [asdict(layer) for layer in self.layers]
        return out

    def table(self) -> str:
        """The per-layer table ``npu profile`` prints."""
        # "op": the source model's operator, numbered as `npu compile --report` numbers it ("-":
        # one the compiler added); "model us": the timing model's time at the chip's clock;
        # "wall us": measured wall time where the layer ran ("on": the chip, or the host CPU
        # for a fallback layer); "core": the chip core it ran on
        rows = [f"{'op':>4} {'layer':<34} {'operator':<18} {'on':<3} {'core':>4} {'cycles':>10} {'model us':>9} "
                f"{'wall us':>9} {'wall %':>6}"]
        total_chip = sum(layer.chip_ns for layer in self.layers) or 1
        for layer in self.layers:
            op = str(layer.source) if layer.source >= 0 else "-"
            core = str(layer.core) if layer.core >= 0 else ""
            rows.append(f"{op:>4} {short_name(layer.name):<34} {layer.op:<18} {layer.device:<3} {core:>4} "
                        f"{layer.cycles:>10} {layer.device_time_ns / 1e3:>9.2f} {layer.chip_ns / 1e3:>9.1f} "
                        f"{100 * layer.chip_ns / total_chip:>6.1f}")
        layer_cycles = sum(layer.cycles for layer in self.layers)
        layer_chip = sum(layer.chip_ns for layer in self.layers)
        rows.append(f"{'':>4} {'layers (sum)':<34} {'':<18} {'':<3} {'':>4} {layer_cycles:>10} "
                    f"{layer_cycles * 1000 // self.clock_mhz / 1e3:>9.2f} {layer_chip / 1e3:>9.1f}")
        rows.append(f"{'':>4} {'inference (job)':<34} {'':<18} {'':<3} {'':>4} {self.cycles:>10} "
                    f"{self.device_time_ns / 1e3:>9.2f} {self.chip_ns / 1e3:>9.1f}")
        if self.cycles < layer_cycles:
            rows.append(f"{'':>4} the inference's cycles are its critical path: its layers ran side by side on the "
                        f"chip's cores ({layer_cycles / self.cycles:.2f}x the sum's speed)")
        if self.timing is not None and self.timing.via_queue:
            rows.append(f"on a user queue (no request to the driver), core {self.core}, then "
                        f"{self.signal_ns / 1e3:.1f} us to its completion (pacing, completion)")
        else:
            rows.append(f"queue wait {self.queue_ns / 1e3:.1f} us, core {self.core}, then "
                        f"{self.signal_ns / 1e3:.1f} us to the fence (pacing, completion, interrupt)")
        if not self.complete:
            rows[-1] += "; some layers' records were lost (the chip's profile queue was full)"
        return "\n".join(rows)


def short_name(name: str, width: int = 34) -> str:
    """A layer's name for a table: the last of TFLite's ';'-joined tensor names that is not
    a weight's (``.../ReadVariableOp/...``), cut to ``width``."""
    parts = name.split(";")
    last = next((p for p in reversed(parts) if "ReadVariableOp" not in p), parts[-1])
    return last if len(last) <= width else "..." + last[-(width - 3):]
