"""The execution provider's Python side: what ``CreateEpFactories`` and ORT's callbacks run,
inside the process that registered the library.

- **Factory** (one per registration): offers one ``OrtEpDevice`` on the host's CPU hardware
  device (ORT lists no NPU here; the chip is reached through its device node, named by the
  options), so ``get_ep_devices()`` shows it.
- **CreateEp** reads this EP's provider options from the session options
  (``ep.<name>.<key>``), checks them and opens the device: a bad option or an absent device
  is one ``OrtStatus`` with a one-line message, which the Python binding raises.
- **GetCapability** reads ORT's graph (nodes, attributes, value types, constant
  initializers) into an ONNX model, asks the compiler's placement
  (:func:`libnpu.compiler.placement.plan_placement`) which nodes the chip runs, reports each
  node's placement (ORT's log; the ``placement_file`` option), and hands ORT each run of
  consecutive chip nodes as one fused node (a run in topological order has no outside node
  on a path between two of its nodes, as fusing requires).
- **Compile** cuts each fused subgraph out as an ONNX model (a QDQ one as it is: the
  compiler's import makes its float twin and keeps the grids its QuantizeLinear nodes
  chose, :mod:`libnpu.compiler.qdq_import`), compiles it through the compile cache and
  loads it on the device; **Compute** copies the inputs in, runs one job, copies
  the outputs out. ORT's CPU EP runs everything else.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import libnpu
from libnpu.compiler.input_shapes import parse_input_shapes
from libnpu.compiler.qdq_import import QDQ_OPS, dequantize
from libnpu.delegate.plugin import _SharedDevice

from . import EP_NAME
from .graph import (
    GraphView,
    OrtCallError,
    OrtTables,
    file_dataset,
    range_dataset,
    read_graph,
    run_order,
    to_onnx,
    twin_model,
)
from .ort_c import HARDWARE_CPU, LOG_INFO, LOG_WARNING, ORT_API_VERSION, ORT_EP_FAIL, ORT_FAIL, ORT_INVALID_ARGUMENT

__all__ = ["EpOptions", "parse_options", "install", "ort_tables", "OrtCallError"]

log = logging.getLogger("libnpu.ort_ep")

VENDOR = "npu-emu"
VERSION = "0.1.0"
RECIPES = ("default", "accurate")
_KNOWN = ("devroot", "device", "cache_dir", "placement_file", "ops", "quantize", "calibration", "recipe",
          "input_shape")


@dataclass
class EpOptions:
    """The EP's provider options (strings, as ORT passes them)."""
    devroot: str | None = None
    device: int = 0
    cache_dir: str | None = None
    placement_file: str | None = None
    ops: frozenset[str] | None = None
    quantize: bool = False               # float models: quantize them (off: they stay with ORT's CPU EP)
    calibration: str | None = None       # a .npy file or a directory, as `npu compile --calibration`
    recipe: str = "default"
    input_shape: dict = field(default_factory=dict)


def _shown(value: str) -> str:
    """``value`` quoted for a one-line message, cut short when long."""
    return repr(value) if len(value) <= 64 else f"{value[:48]!r}... ({len(value)} characters)"


def parse_options(pairs: list[tuple[str, str]]) -> EpOptions:
    """Options from ORT's key/value strings; ValueError names a bad one."""
    options = EpOptions()
    for key, value in pairs:
        if key == "devroot":
            options.devroot = value or None
        elif key == "device":
            if not value.isdigit():
                raise ValueError(f"npu ort-ep: option device={_shown(value)} is not a device number (0, 1, ...)")
            options.device = int(value)
        elif key == "cache_dir":
            options.cache_dir = value or None
        elif key == "placement_file":
            options.placement_file = value or None
        elif key == "ops":
            options.ops = frozenset(v.strip() for v in value.split(",") if v.strip())
        elif key == "quantize":
            lowered = value.strip().lower()
            if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(f"npu ort-ep: option quantize={_shown(value)} is not a boolean (true/false)")
            options.quantize = lowered in ("1", "true", "yes", "on")
        elif key == "calibration":
            if value and (not Path(value).is_file() or Path(value).suffix != ".npy"):
                raise ValueError(f"npu ort-ep: option calibration={_shown(value)}: not a .npy file")
            options.calibration = value or None
        elif key == "recipe":
            if value not in RECIPES:
                raise ValueError(f"npu ort-ep: option recipe={_shown(value)} must be one of {', '.join(RECIPES)}")
            options.recipe = value
        elif key == "input_shape":
            try:
                options.input_shape = parse_input_shapes(v for v in value.split(";") if v.strip())
            except ValueError as exc:
                raise ValueError(f"npu ort-ep: option input_shape={_shown(value)}: {exc}") from None
        else:
            raise ValueError(f"npu ort-ep: unknown option {_shown(key)} (known: {', '.join(_KNOWN)})")
    return options


# The EP ----------------------------------------------------------------------------------

class _Kernel:
    """One fused node: its subgraph compiled and loaded on the device."""

    def __init__(self, ep: NpuEp, name: str, inputs: list[str], outputs: list[str], model_bytes: bytes,
                 dataset: Any) -> None:
        """``inputs``: the model's name of each input of the fused node ("" for a constant it
        holds); ``outputs``: the model's name of each output."""
        self.ep, self.name = ep, name
        self.inputs, self.outputs = inputs, outputs
        self.lock = threading.Lock()
        ep.shared.hold()
        try:
            options: dict[str, Any] = {}
            shapes = {k: v for k, v in ep.options.input_shape.items() if k is None or k in inputs}
            if shapes:            # the model's inputs this subgraph has (a later one's are fixed by now)
                options["input_shapes"] = shapes
            if ep.options.recipe != "default":
                options["recipe"] = ep.options.recipe
            self.model = libnpu.load(model_bytes, ep.shared.device, cache_dir=ep.options.cache_dir,
                                     calibration=dataset, **options)
            self.request = self.model.create_request()
        except BaseException:
            ep.shared.release()
            raise
        self.feed_names = [d.name for d in self.model.inputs]
        # the compiled model's outputs, in the order of the model's graph outputs (names the
        # compiler keeps are used; it renames an output that is also an input or a constant)
        fetch_names = [d.name for d in self.model.outputs]
        ordered = list(dict.fromkeys(outputs))
        self.fetch_index = {name: fetch_names.index(name) if name in fetch_names else ordered.index(name)
                            for name in ordered}

    def compute(self, ort: OrtTables, context: Any) -> None:
        ffi, api = ort.ffi, ort.api
        count = ffi.new("size_t*")
        ort.check(api.KernelContext_GetInputCount(context, count))
        given: dict[str, np.ndarray] = {}
        for i in range(count[0]):
            name = self.inputs[i] if i < len(self.inputs) else ""
            if not name:
                continue
            value = ffi.new("const OrtValue**")
            ort.check(api.KernelContext_GetInput(context, i, value))
            given[name] = ort.array(value[0])
        with self.lock:
            results = self.request.infer([given[n] for n in self.feed_names])
        for j, name in enumerate(self.outputs):
            result = np.ascontiguousarray(results[self.fetch_index[name]])
            dims = ffi.new("int64_t[]", list(result.shape) or [0])
            value = ffi.new("OrtValue**")
            ort.check(api.KernelContext_GetOutput(context, j, dims, result.ndim, value))
            size, data = ffi.new("size_t*"), ffi.new("void**")
            ort.check(api.GetTensorSizeInBytes(value[0], size))
            if size[0] != result.nbytes:
                raise OrtCallError(f"fused node {self.name}: output {name} has {result.nbytes} bytes, "
                                   f"ORT's tensor {size[0]}")
            ort.check(api.GetTensorMutableData(value[0], data))
            ffi.memmove(data[0], result.tobytes(), result.nbytes)

    def close(self) -> None:
        try:
            self.model.close()
        finally:
            self.ep.shared.release()


class NpuEp:
    """One ``OrtEp`` (one per session): its options, its device, its fused nodes."""

    def __init__(self, ort: OrtTables, lib: Any, options: EpOptions, logger: Any) -> None:
        self.ort, self.options, self.logger = ort, options, logger
        self.shared = _SharedDevice(options)          # an absent device raises here
        ffi = ort.ffi
        self.struct = ffi.new("OrtEp*")
        self.struct.ort_version_supported = ORT_API_VERSION
        self.struct.GetName = lib.npu_ort_ep_name
        self.struct.GetCapability = lib.npu_ort_get_capability
        self.struct.Compile = lib.npu_ort_compile
        self.struct.ReleaseNodeComputeInfos = lib.npu_ort_release_compute_infos
        self.struct.GetCompiledModelCompatibilityInfo = lib.npu_ort_compatibility_info
        self.fusion = ffi.new("OrtNodeFusionOptions*")
        self.fusion.ort_version_supported = ORT_API_VERSION
        self.fusion.drop_constant_initializers = True     # the compiled model holds its constants
        self.lib = lib
        self.kernels: dict[int, tuple[Any, _Kernel]] = {}

    def say(self, level: int, message: str) -> None:
        log.log(logging.INFO if level == LOG_INFO else logging.WARNING, "%s", message)
        self.ort.log(self.logger, level, message)

    def dataset(self, view: GraphView, names: list[str]) -> Any:
        """The ``calibration`` option's feeds for a model whose inputs are ``names``, else None."""
        return file_dataset(self.options.calibration, view, names) if self.options.calibration else None

    def _placements(self, view: GraphView) -> list[tuple[bool, str]]:
        """(on the chip, why not) per node of ``view``."""
        from libnpu.compiler.placement import NPU, plan_placement  # the compiler: only when a graph is placed
        quantized = any(n.op_type in QDQ_OPS for n in view.nodes)
        if not quantized and not self.options.quantize:
            why = "a float model: the EP runs quantized (QDQ) models; provider option quantize=true quantizes it"
            return [(False, why)] * len(view.nodes)
        twin = dequantize(view.nodes, view.constants)
        model, origins = twin_model(view, twin, view.inputs, view.outputs, view.name)
        names = list(dict.fromkeys(twin.name(i) for i in view.inputs))
        dataset = self.dataset(view, names) or (range_dataset(view, twin, view.inputs) if twin.ranges else None)
        plan = plan_placement(model, ops=self.options.ops, kind="onnx", input_shapes=self.options.input_shape or None,
                              dataset=dataset)
        placed: dict[int, tuple[bool, str]] = {}
        for k, p in zip(origins, plan.placements):
            if k < 0:
                continue        # a clamp's Relu: it goes with the pair that made it
            why = view.nodes[k].unreadable or p.reason
            placed[k] = (p.device == NPU and not why, why)
        for k, near in twin.neighbours.items():       # a Q/DQ node goes where the nodes it serves go
            refused = [placed[m][1] for m in sorted(near) if not placed[m][0]]
            placed[k] = (bool(near) and not refused,
                         f"serves a node on the CPU ({refused[0]})" if refused else "" if near else
                         "serves no node the EP runs")
        return [placed[i] for i in range(len(view.nodes))]

    def get_capability(self, graph: Any, support: Any) -> None:
        ort = self.ort
        parent = ort.ffi.new("const OrtNode**")
        ort.check(ort.api.Graph_GetParentNode(graph, parent))
        if parent[0] != ort.ffi.NULL:
            return                   # a nested subgraph (If/Loop body): left to ORT's CPU EP
        view = read_graph(ort, graph)
        try:
            placements = self._placements(view)
        except Exception as exc:  # noqa: BLE001 - a model the compiler cannot place runs on ORT's CPU EP
            self.say(LOG_WARNING, f"npu ort-ep: no node placed on the NPU: {' '.join(str(exc).split())}")
            return
        runs: list[list[int]] = []
        previous_on = False
        for i in run_order(view):
            if placements[i][0]:
                if previous_on:
                    runs[-1].append(i)
                else:
                    runs.append([i])
            previous_on = placements[i][0]
        # a run fed by constants alone (weights behind a DequantizeLinear) computes nothing at run time
        runs = [r for r in runs if any(i and i not in view.constants for n in r for i in view.nodes[n].inputs)]
        fused = {i for r in runs for i in r}
        lines = [f"{len(fused)} of {len(view.nodes)} nodes on the NPU in {len(runs)} fused node(s)"]
        for i, (node, (_, why)) in enumerate(zip(view.nodes, placements)):
            where = "NPU" if i in fused else "CPU"
            reason = "" if i in fused else f": {why or 'its run computes nothing at run time (constants only)'}"
            lines.append(f"node {i} {node.op_type} {node.name!r}: {where}{reason}")
        for line in lines:
            self.say(LOG_INFO, f"npu ort-ep: {line}")
        if self.options.placement_file:
            Path(self.options.placement_file).write_text("\n".join(lines) + "\n")
        for run in runs:
            handles = ort.ffi.new("const OrtNode*[]", [view.nodes[i].handle for i in sorted(run)])
            ort.check(ort.ep_api.EpGraphSupportInfo_AddNodesToFuse(support, handles, len(run), self.fusion))

    def compile(self, graphs: Any, fused_nodes: Any, count: int, infos: Any) -> None:
        ort, ffi, api = self.ort, self.ort.ffi, self.ort.api
        made = []
        try:
            for k in range(count):
                view = read_graph(ort, graphs[k])
                fused = fused_nodes[k]
                name = ort.text(api.Node_GetName, fused)
                inputs = [ort.text(api.GetValueInfoName, vi) if vi != ffi.NULL else "" for vi in
                          ort.listed(api.Node_GetNumInputs, api.Node_GetInputs, fused, "const OrtValueInfo*")]
                outputs = [ort.text(api.GetValueInfoName, vi) for vi in
                           ort.listed(api.Node_GetNumOutputs, api.Node_GetOutputs, fused, "const OrtValueInfo*")]
                feeds = [i for i in inputs if i and i not in view.constants]
                model = to_onnx(view, view.nodes, feeds, outputs, name)    # a QDQ one: the compiler twins it
                kernel = _Kernel(self, name, [i if i in feeds else "" for i in inputs], outputs, model,
                                 self.dataset(view, feeds))
                info = ffi.new("OrtNodeComputeInfo*")
                info.ort_version_supported = ORT_API_VERSION
                info.CreateState = self.lib.npu_ort_create_state
                info.Compute = self.lib.npu_ort_compute
                info.ReleaseState = self.lib.npu_ort_release_state
                made.append((info, kernel))
                self.say(LOG_INFO, f"npu ort-ep: fused node {name}: {len(view.nodes)} nodes compiled "
                                   f"({', '.join(sorted({n.op_type for n in view.nodes}))})")
        except BaseException:
            for _, kernel in made:
                kernel.close()
            raise
        for k, (info, kernel) in enumerate(made):
            infos[k] = info
            with _lock:
                _live[_address(ffi, info)] = (info, kernel)

    def release_infos(self, infos: Any, count: int) -> None:
        for k in range(count):
            with _lock:
                entry = _live.pop(_address(self.ort.ffi, infos[k]), None)
            if entry is not None:
                try:
                    entry[1].close()
                except Exception as exc:  # noqa: BLE001 - ORT is tearing down: log, do not crash
                    log.error("npu ort-ep: closing a fused node failed: %s", exc)

    def release(self) -> None:
        self.shared.release()


class Factory:
    """The one ``OrtEpFactory`` a registration gets."""

    def __init__(self, ort: OrtTables, lib: Any, registered_name: str) -> None:
        ffi = ort.ffi
        self.ort, self.registered_name = ort, registered_name
        self.struct = ffi.new("OrtEpFactory*")
        s = self.struct
        s.ort_version_supported = ORT_API_VERSION
        s.GetName, s.GetVendor, s.GetVersion = lib.npu_ort_factory_name, lib.npu_ort_factory_vendor, \
            lib.npu_ort_factory_version
        s.GetSupportedDevices, s.CreateEp, s.ReleaseEp = lib.npu_ort_supported_devices, lib.npu_ort_create_ep, \
            lib.npu_ort_release_ep
        s.GetVendorId, s.ValidateCompiledModelCompatibilityInfo = lib.npu_ort_vendor_id, lib.npu_ort_validate_compiled
        s.CreateAllocator, s.ReleaseAllocator = lib.npu_ort_create_allocator, lib.npu_ort_release_allocator
        s.CreateDataTransfer, s.IsStreamAware = lib.npu_ort_create_data_transfer, lib.npu_ort_is_stream_aware
        s.CreateSyncStreamForDevice = lib.npu_ort_create_sync_stream


def _options_from_session(ort: OrtTables, session_options: Any) -> list[tuple[str, str]]:
    """This EP's ``ep.<name>.<key>`` entries of the session's configuration."""
    ffi, api = ort.ffi, ort.api
    pairs = ffi.new("OrtKeyValuePairs**")
    ort.check(api.GetSessionOptionsConfigEntries(session_options, pairs))
    try:
        keys, values, count = ffi.new("const char* const**"), ffi.new("const char* const**"), ffi.new("size_t*")
        api.GetKeyValuePairs(pairs[0], keys, values, count)
        entries = [(ffi.string(keys[0][i]).decode(), ffi.string(values[0][i]).decode()) for i in range(count[0])]
    finally:
        api.ReleaseKeyValuePairs(pairs[0])
    prefix = f"ep.{EP_NAME.lower()}."
    return [(k[len(prefix):], v) for k, v in entries if k.lower().startswith(prefix)]


def _message(exc: BaseException) -> str:
    """One line for ORT's status."""
    if isinstance(exc, OSError) and exc.filename:
        message = f"{exc.filename}: {exc.strerror}"
    elif isinstance(exc, (ValueError, OrtCallError)):
        message = str(exc)
    else:
        message = f"{type(exc).__name__}: {exc}"
    message = " ".join(message.split())
    return message if message.startswith("npu ort-ep") else f"npu ort-ep: {message}"


_live: dict[int, Any] = {}          # address of a struct given to ORT -> (struct, object)
_state: dict[str, OrtTables] = {}        # "ort": the function tables ORT gave this process
_lock = threading.Lock()


def _address(ffi: Any, pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def _find(ffi: Any, pointer: Any) -> Any:
    with _lock:
        return _live[_address(ffi, pointer)][1]


def ort_tables() -> OrtTables | None:
    """ORT's function tables as this process's registration got them (None before one)."""
    return _state.get("ort")


def install(ffi: Any, lib: Any) -> None:
    """Bind the library's Python-implemented functions (run once, by the init code)."""
    strings = {k: ffi.new("char[]", v.encode()) for k, v in
               (("name", EP_NAME), ("vendor", VENDOR), ("version", VERSION))}
    state = _state

    def guarded(code: int, what: str, step: Any) -> Any:
        """Run ``step``; an exception becomes ORT's error status with a one-line message."""
        try:
            step()
            return ffi.NULL
        except Exception as exc:  # noqa: BLE001 - ORT gets a status, never a Python exception
            message = _message(exc)
            log.error("%s (%s)", message, what)
            return state["ort"].status(code, message)

    @ffi.def_extern()
    def npu_ort_create_factories_py(registered_name, api_base, logger, factories, max_factories, factory_count):
        try:
            ort = state.setdefault("ort", OrtTables(ffi, api_base))
        except OrtCallError as exc:   # an ORT too old for this API: version 1's CreateStatus says so
            return api_base.GetApi(1).CreateStatus(ORT_FAIL, ffi.new("char[]", f"npu ort-ep: {exc}".encode()))
        factory_count[0] = 0
        if max_factories < 1:
            return ort.status(ORT_INVALID_ARGUMENT, "npu ort-ep: ORT offers no room for a factory")
        factory = Factory(ort, lib, ffi.string(registered_name).decode())
        with _lock:
            _live[_address(ffi, factory.struct)] = (factory.struct, factory)
        factories[0] = factory.struct
        factory_count[0] = 1
        return ffi.NULL

    @ffi.def_extern()
    def npu_ort_release_factory_py(factory):
        with _lock:
            _live.pop(_address(ffi, factory), None)
        return ffi.NULL

    @ffi.def_extern()
    def npu_ort_factory_name(self):
        return strings["name"]

    @ffi.def_extern()
    def npu_ort_factory_vendor(self):
        return strings["vendor"]

    @ffi.def_extern()
    def npu_ort_factory_version(self):
        return strings["version"]

    @ffi.def_extern()
    def npu_ort_ep_name(self):
        return strings["name"]

    @ffi.def_extern()
    def npu_ort_supported_devices(self, devices, count, ep_devices, max_ep_devices, ep_device_count):
        ort = state["ort"]

        def offer() -> None:
            ep_device_count[0] = 0
            for i in range(count):
                if ort.api.HardwareDevice_Type(devices[i]) == HARDWARE_CPU and max_ep_devices > 0:
                    out = ffi.new("OrtEpDevice**")
                    ort.check(ort.ep_api.CreateEpDevice(self, devices[i], ffi.NULL, ffi.NULL, out))
                    ep_devices[0] = out[0]
                    ep_device_count[0] = 1
                    return
        return guarded(ORT_FAIL, "GetSupportedDevices", offer)

    @ffi.def_extern()
    def npu_ort_create_ep(self, devices, metadata, count, session_options, logger, ep_out):
        ort = state["ort"]

        def create() -> None:
            options = parse_options(_options_from_session(ort, session_options))
            ep = NpuEp(ort, lib, options, logger)
            with _lock:
                _live[_address(ffi, ep.struct)] = (ep.struct, ep)
            ep_out[0] = ep.struct
        return guarded(ORT_INVALID_ARGUMENT, "CreateEp", create)

    @ffi.def_extern()
    def npu_ort_release_ep(self, ep):
        with _lock:
            entry = _live.pop(_address(ffi, ep), None)
        if entry is not None:
            try:
                entry[1].release()
            except Exception as exc:  # noqa: BLE001 - ORT is tearing down: log, do not crash
                log.error("npu ort-ep: closing the device failed: %s", exc)

    @ffi.def_extern()
    def npu_ort_get_capability(self, graph, support):
        return guarded(ORT_EP_FAIL, "GetCapability", lambda: _find(ffi, self).get_capability(graph, support))

    @ffi.def_extern()
    def npu_ort_compile(self, graphs, fused_nodes, count, infos, ep_context_nodes):
        return guarded(ORT_EP_FAIL, "Compile", lambda: _find(ffi, self).compile(graphs, fused_nodes, count, infos))

    @ffi.def_extern()
    def npu_ort_release_compute_infos(self, infos, count):
        ep = _live.get(_address(ffi, self))
        if ep is not None:
            ep[1].release_infos(infos, count)

    @ffi.def_extern()
    def npu_ort_create_state(self, context, state_out):
        state_out[0] = self          # the compute info is the state: one kernel per fused node
        return ffi.NULL

    @ffi.def_extern()
    def npu_ort_compute(self, compute_state, context):
        return guarded(ORT_EP_FAIL, "Compute", lambda: _find(ffi, self).compute(state["ort"], context))

    @ffi.def_extern()
    def npu_ort_release_state(self, compute_state):
        pass
