"""Per-layer profiles of inferences (PERF_COUNT), as OpenVINO's ``get_profiling_info``.

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
reports only its own tasks.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from firmware_sim.spec import tasks as task_spec
from libnpu.loadable import Loadable
from libnpu.portability import JobTiming


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


@dataclass
class InferenceProfile:
    """One inference's layers and totals (see the module doc)."""

    layers: list[LayerProfile]
    cycles: int
    device_time_ns: int
    chip_ns: int                # the job's measured execution on its core
    queue_ns: int               # driver accepted the job -> a core started it
    signal_ns: int              # execution ended -> fence signalled: any pacing, the completion, the interrupt
    core: int
    complete: bool              # every layer's record arrived from the chip
    clock_mhz: int
    timing: JobTiming | None = field(default=None, repr=False)

    @classmethod
    def from_job(cls, loadable: Loadable, job: JobTiming, clock_mhz: int) -> InferenceProfile:
        layers = []
        for record in job.tasks:
            task = loadable.tasks[record.index] if record.index < len(loadable.tasks) else None
            spec = task_spec.TASK_TYPES.get(record.opcode)
            op = task.op if task else (spec.name if spec else f"op{record.opcode:#x}")
            layers.append(LayerProfile(record.index, task.name if task else op, op, "NPU", record.cycles,
                                       record.cycles * 1000 // clock_mhz, record.end_ns - record.start_ns,
                                       record.start_ns, record.end_ns))
        chip_ns = job.end_ns - job.start_ns
        return cls(layers, job.cycles, job.device_time_ns, chip_ns, job.queue_ns,
                   max(0, job.signal_ns - job.end_ns), job.core, job.complete, clock_mhz, job)

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("timing", "layers")}
        out["layers"] = [asdict(layer) for layer in self.layers]
        return out

    def table(self) -> str:
        """The per-layer table ``npu profile`` prints."""
        rows = [f"{'#':>3} {'layer':<34} {'op':<18} {'on':<3} {'cycles':>10} {'sim us':>9} {'chip us':>9} "
                f"{'chip %':>6}"]
        total_chip = sum(layer.chip_ns for layer in self.layers) or 1
        for layer in self.layers:
            rows.append(f"{layer.index:>3} {short_name(layer.name):<34} {layer.op:<18} {layer.device:<3} "
                        f"{layer.cycles:>10} {layer.device_time_ns / 1e3:>9.2f} {layer.chip_ns / 1e3:>9.1f} "
                        f"{100 * layer.chip_ns / total_chip:>6.1f}")
        layer_cycles = sum(layer.cycles for layer in self.layers)
        layer_chip = sum(layer.chip_ns for layer in self.layers)
        rows.append(f"{'':>3} {'layers (sum)':<34} {'':<18} {'':<3} {layer_cycles:>10} "
                    f"{layer_cycles * 1000 // self.clock_mhz / 1e3:>9.2f} {layer_chip / 1e3:>9.1f}")
        rows.append(f"{'':>3} {'inference (job)':<34} {'':<18} {'':<3} {self.cycles:>10} "
                    f"{self.device_time_ns / 1e3:>9.2f} {self.chip_ns / 1e3:>9.1f}")
        rows.append(f"queue wait {self.queue_ns / 1e3:.1f} us, core {self.core}, then {self.signal_ns / 1e3:.1f} us "
                    "to the fence (pacing, completion, interrupt)"
                    + ("" if self.complete else "; some layers' records were lost (the chip's profile queue was full)"))
        return "\n".join(rows)


def short_name(name: str, width: int = 34) -> str:
    """A layer's name for a table: the last of TFLite's ';'-joined tensor names that is not
    a weight's (``.../ReadVariableOp/...``), cut to ``width``."""
    parts = name.split(";")
    last = next((p for p in reversed(parts) if "ReadVariableOp" not in p), parts[-1])
    return last if len(last) <= width else "..." + last[-(width - 3):]
