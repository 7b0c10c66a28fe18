"""The delegate's Python side: what ``tflite_plugin_create_delegate`` and the interpreter's
callbacks run, inside the process that loaded the library.

- **Create** parses the options and opens the device (an absent device or a bad option
  returns NULL, and LiteRT's ``load_delegate`` raises ValueError with our message).
- **Prepare** (``TfLiteDelegate.Prepare``) reads the interpreter's nodes, rebuilds them as
  a ``.tflite`` (:mod:`.submodel`), asks the compiler's placement decision
  (:func:`libnpu.compiler.placement.place_model`) which ones the chip runs, keeps the
  quantized ones, lets TFLite group them into partitions, drops partitions the options
  rule out, and hands the rest to ``ReplaceNodeSubsetsWithDelegateKernels``.
- **Each partition** is one kernel: ``prepare`` compiles its sub-model through the compile
  cache and loads it on the device (again only if the shapes changed), ``invoke`` copies
  the inputs in, runs one job (or jobs and host steps), copies the outputs out.
- **Lifetimes**: kernels and the delegate share the device session; whichever of them
  goes last closes it, so destroying the delegate before or after its interpreters frees
  every buffer exactly once. A destroyed delegate's C struct is kept (a few bytes) in
  case an interpreter still holds it.
"""
from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from libnpu.compiler.ir import zero_point_error
from libnpu.visible_devices import DeviceChoiceError

from .submodel import Node, TensorInfo, read_node, read_tensor, tensor_name, write_model
from .tflite_c import FLAGS, K_DELEGATE_ERROR, K_ERROR, K_OK

__all__ = ["DelegateOptions", "parse_options", "install"]

log = logging.getLogger("libnpu.delegate")

PRIORITIES = ("LOW", "MEDIUM", "HIGH")
_QUANTIZED = ("int8", "int16")


@dataclass
class DelegateOptions:
    """The delegate's options (strings, as TFLite passes them)."""
    devroot: str | None = None
    device: int | None = None        # a visible device's index; None: $NPU_DEVICE, else 0 (libnpu.visible_devices)
    ops: frozenset[str] | None = None
    cache_dir: str | None = None
    verbose: bool = False
    max_partitions: int = 0          # 0: no limit
    min_nodes_per_partition: int = 1
    priority: str = "MEDIUM"


def _shown(value: str) -> str:
    """``value`` quoted for a one-line message, cut short when long (a message never carries
    a megabyte of the caller's option)."""
    return repr(value) if len(value) <= 64 else f"{value[:48]!r}... ({len(value)} characters)"


def _int(name: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"npu delegate: option {name}={_shown(value)} is not an integer") from None
    if number < minimum:
        raise ValueError(f"npu delegate: option {name}={_shown(value)} must be >= {minimum}")
    return number


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"npu delegate: option {name}={_shown(value)} is not a boolean (true/false)")


def parse_options(pairs: list[tuple[str, str]]) -> DelegateOptions:
    """Options from TFLite's key/value strings; ValueError names a bad one."""
    import tflite  # type: ignore[import-untyped]
    known_ops = {k for k in vars(tflite.BuiltinOperator) if not k.startswith("_")}
    options = DelegateOptions()
    for key, value in pairs:
        if key == "devroot":
            options.devroot = value or None
        elif key == "device":
            options.device = _int(key, value, 0)
        elif key == "ops":
            names = frozenset(v.strip().upper() for v in value.split(",") if v.strip())
            unknown = sorted(names - known_ops)
            if unknown:
                raise ValueError(f"npu delegate: option ops names unknown TFLite operators: {', '.join(unknown)}")
            options.ops = names
        elif key == "cache_dir":
            options.cache_dir = value or None
        elif key == "verbose":
            options.verbose = _bool(key, value)
        elif key == "max_partitions":
            options.max_partitions = _int(key, value, 0)
        elif key == "min_nodes_per_partition":
            options.min_nodes_per_partition = _int(key, value, 1)
        elif key == "priority":
            if value.upper() not in PRIORITIES:
                raise ValueError(f"npu delegate: option priority={_shown(value)} must be one of "
                                 f"{', '.join(PRIORITIES)}")
            options.priority = value.upper()
        else:
            raise ValueError(f"npu delegate: unknown option {key!r} (known: devroot, device, ops, cache_dir, "
                             "verbose, max_partitions, min_nodes_per_partition, priority)")
    return options


class _SharedDevice:
    """The device session, closed when its last user (delegate or kernel) lets go."""

    def __init__(self, options: DelegateOptions) -> None:
        from libnpu.portability import Session
        self.session = Session(options.devroot)
        try:
            self.device = self.session.open(options.device)
        except BaseException:
            self.session.destroy()
            raise
        self._users = 1
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self.session.destroy()


class _Partition:
    """One delegated partition: its sub-model, compiled and loaded on the device."""

    def __init__(self, delegate: NpuDelegate, nodes: list[Node], inputs: list[int], outputs: list[int]) -> None:
        self.delegate, self.options = delegate, delegate.options
        self.nodes, self.outputs = nodes, outputs
        self.tensors = {i: delegate.tensors[i] for n in nodes for i in (*n.inputs, *n.outputs) if i >= 0}
        self.inputs = [i for i in inputs if not self.tensors[i].constant]
        self.shared = delegate.shared
        self.shared.hold()
        self.model: Any = None
        self.request: Any = None
        self.shapes: tuple = ()

    def describe(self) -> str:
        first, last = self.nodes[0].index, self.nodes[-1].index
        ops = sorted({n.op for n in self.nodes})
        return f"nodes {first}-{last} ({len(self.nodes)}: {', '.join(ops)})"

    def prepare(self, ffi: Any, context: Any) -> None:
        shapes = tuple(tuple(read_tensor(ffi, context, i).shape) for i in self.inputs)
        if self.model is not None and shapes == self.shapes:
            return
        if shapes != tuple(self.tensors[i].shape for i in self.inputs):
            # resize_tensor_input: TFLite has propagated the new shapes through the partition's own
            # nodes (FLAGS asks it to), so the sub-model is written again with the tensors as they are now
            self.tensors = {i: read_tensor(ffi, context, i) for i in self.tensors}
        self._close_model()
        data = write_model(self.tensors, self.nodes, self.inputs, self.outputs)
        import libnpu
        self.model = libnpu.load(data, self.shared.device, cache_dir=self.options.cache_dir)
        if self.options.priority != "MEDIUM":
            self.model.set_property({"MODEL_PRIORITY": self.options.priority})
        self.request = self.model.create_request()
        self.shapes = shapes
        names = [d.name for d in self.model.inputs]
        self.feed_order = [int(n[1:]) for n in names]
        self.fetch_order = [int(d.name[1:]) for d in self.model.outputs]

    def invoke(self, ffi: Any, context: Any) -> None:
        feeds = []
        for index in self.feed_order:
            t = context.tensors[index]
            info = self.tensors[index]
            feeds.append(np.frombuffer(ffi.buffer(t.data, t.bytes), info.dtype).reshape(info.shape))
        results = self.request.infer(feeds)
        for index, value in zip(self.fetch_order, results):
            t = context.tensors[index]
            raw = np.ascontiguousarray(value).tobytes()
            if len(raw) != t.bytes:
                raise ValueError(f"partition {self.describe()}: output {tensor_name(index)} has {len(raw)} bytes, "
                                 f"the interpreter's tensor {t.bytes}")
            ffi.memmove(t.data, raw, len(raw))

    def _close_model(self) -> None:
        if self.model is not None:
            model, self.model, self.request = self.model, None, None
            model.close()

    def free(self) -> None:
        try:
            self._close_model()
        finally:
            self.shared.release()


class NpuDelegate:
    """One ``TfLiteDelegate``: its options, its device and its partitions."""

    def __init__(self, ffi: Any, lib: Any, options: DelegateOptions, callbacks: dict[str, Any],
                 registration_name: Any) -> None:
        self.ffi, self.options = ffi, options
        self.lib_callbacks, self.registration_name = callbacks, registration_name
        self.shared = _SharedDevice(options)
        self.handle = ffi.new_handle(self)
        self.struct = ffi.new("TfLiteDelegate*")
        self.struct.data_ = self.handle
        self.struct.Prepare = lib.npu_delegate_prepare
        self.struct.flags = FLAGS
        self.tensors: dict[int, TensorInfo] = {}
        self.nodes: dict[int, Node] = {}
        self.destroyed = False

    def say(self, message: str) -> None:
        if self.options.verbose:
            print(f"npu delegate: {message}", file=sys.stderr, flush=True)

    # Prepare --------------------------------------------------------------------------
    def _read_graph(self, context: Any) -> list[Node]:
        plan_p = self.ffi.new("TfLiteIntArray**")
        if context.GetExecutionPlan(context, plan_p) != K_OK:
            raise RuntimeError("the interpreter gave no execution plan")
        plan = [int(plan_p[0].data[i]) for i in range(plan_p[0].size)]
        nodes = [read_node(self.ffi, context, i) for i in plan]
        for node in nodes:
            for i in (*node.inputs, *node.outputs):
                if i >= 0 and i not in self.tensors:
                    self.tensors[i] = read_tensor(self.ffi, context, i)
            self.nodes[node.index] = node
        return nodes

    def _quantized(self, node: Node) -> str:
        """Why the chip should not take ``node`` from the interpreter ("" when it may)."""
        if node.unreadable:
            return node.unreadable
        activations = [self.tensors[i] for i in (*node.inputs, *node.outputs) if i >= 0
                       and not self.tensors[i].constant]
        if any(t.dtype is None for t in (self.tensors[i] for i in (*node.inputs, *node.outputs) if i >= 0)):
            return "a tensor type the chip does not carry"
        # An int8 model's uint8 edge: the compiler's placement decides (a sign-bit flip or not).
        carried = (*_QUANTIZED, "uint8") if node.op == "QUANTIZE" else _QUANTIZED
        if not activations or any(t.dtype not in carried for t in activations):
            return "not a quantized operator (the delegate runs int8/int16 partitions)"
        if any(0 in t.shape for t in activations):
            return "an empty tensor (a 0 in its shape): the chip runs no empty tensor"
        for t in activations:
            if t.zero_point is not None and t.dtype is not None and (why := zero_point_error(t.dtype, t.zero_point)):
                return f"tensor {tensor_name(t.index)}: {why}"
        return ""

    def _placement(self, nodes: list[Node]) -> dict[int, str]:
        """Node index -> why it stays on the CPU, for every node the chip will not run."""
        refused = {n.index: why for n in nodes if (why := self._quantized(n))}
        candidates = [n for n in nodes if n.index not in refused]
        if not candidates:
            return refused
        from libnpu.compiler.placement import CPU, place_model
        produced = {o for n in candidates for o in n.outputs}
        consumed = {i for n in candidates for i in n.inputs if i >= 0}
        inputs = sorted(i for i in consumed - produced if not self.tensors[i].constant)
        outputs = sorted(produced - consumed) or sorted(produced)
        tensors = {i: self.tensors[i] for n in candidates for i in (*n.inputs, *n.outputs) if i >= 0}
        whole = write_model(tensors, candidates, inputs, outputs, name="delegate placement")
        for p in place_model(whole, ops=self.options.ops):
            if p.device == CPU:
                refused[candidates[p.index].index] = p.reason
        return refused

    def _partitions(self, context: Any, claimed: list[int]) -> list[list[int]]:
        """TFLite's grouping of ``claimed`` into partitions, minus those the options rule out."""
        ffi = self.ffi
        request = ffi.new("int[]", [len(claimed), *claimed])
        params_p, count_p = ffi.new("TfLiteDelegateParams**"), ffi.new("int*")
        status = context.PreviewDelegatePartitioning(context, ffi.cast("TfLiteIntArray*", request), params_p,
                                                     count_p)
        if status != K_OK:
            raise RuntimeError("the interpreter could not preview the partitions")
        groups = []
        for k in range(count_p[0]):
            nodes = params_p[0][k].nodes_to_replace
            groups.append([int(nodes.data[i]) for i in range(nodes.size)])
        kept = [g for g in groups if len(g) >= self.options.min_nodes_per_partition]
        if self.options.max_partitions:
            kept = sorted(kept, key=len, reverse=True)[:self.options.max_partitions]
        return sorted(kept)

    def prepare(self, context: Any) -> int:
        nodes = self._read_graph(context)
        refused = self._placement(nodes)
        claimed = [n.index for n in nodes if n.index not in refused]
        partitions = self._partitions(context, claimed) if claimed else []
        chosen = sorted(i for group in partitions for i in group)
        self.say(f"{len(chosen)} of {len(nodes)} nodes on the NPU in {len(partitions)} partition(s)")
        for group in partitions:
            ops = sorted({self.nodes[i].op for i in group})
            self.say(f"  NPU partition: nodes {group[0]}-{group[-1]} ({len(group)}: {', '.join(ops)})")
        for node in nodes:
            if node.index not in chosen:
                why = refused.get(node.index, "its partition was left out by max_partitions/min_nodes_per_partition")
                self.say(f"  CPU node {node.index} {node.op}: {why}")
        if not chosen:
            return K_OK
        ffi = self.ffi
        registration = ffi.new("TfLiteRegistration*")
        registration.init = self.lib_callbacks["init"]
        registration.free = self.lib_callbacks["free"]
        registration.prepare = self.lib_callbacks["prepare"]
        registration.invoke = self.lib_callbacks["invoke"]
        registration.builtin_code = 51          # BuiltinOperator.DELEGATE
        registration.custom_name = self.registration_name
        registration.version = 1
        replace = ffi.new("int[]", [len(chosen), *chosen])
        return int(context.ReplaceNodeSubsetsWithDelegateKernels(
            context, registration[0], ffi.cast("TfLiteIntArray*", replace), self.struct))

    def destroy(self) -> None:
        if not self.destroyed:
            self.destroyed = True
            self.shared.release()


# The C entry points ---------------------------------------------------------------------

_live: dict[int, Any] = {}          # address -> object kept alive while C holds a pointer to it
_kept_structs: list[Any] = []       # destroyed delegates' structs (an interpreter may still point at one)
_lock = threading.Lock()


def _address(ffi: Any, pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def _report(ffi: Any, context: Any, message: str) -> None:
    log.error("%s", message)
    try:
        context.ReportError(context, ffi.new("char[]", b"%s"), ffi.new("char[]", message.encode(errors="replace")))
    except Exception:  # noqa: BLE001 - reporting must never turn into a crash
        print(message, file=sys.stderr)


def install(ffi: Any, lib: Any) -> None:
    """Bind the library's Python-implemented functions (run once, by the init code)."""
    callbacks = dict(init=lib.npu_kernel_init, free=lib.npu_kernel_free, prepare=lib.npu_kernel_prepare,
                     invoke=lib.npu_kernel_invoke)
    registration_name = ffi.new("char[]", b"NpuEmuDelegate")

    @ffi.def_extern()
    def npu_delegate_create_py(keys, values, count, report_error):
        try:
            pairs = [(ffi.string(keys[i]).decode(), ffi.string(values[i]).decode()) for i in range(count)]
            options = parse_options(pairs)
            delegate = NpuDelegate(ffi, lib, options, callbacks, registration_name)
        except Exception as exc:  # noqa: BLE001 - every failure becomes NULL and a message
            if isinstance(exc, ValueError):
                message = str(exc)
            elif isinstance(exc, OSError) and exc.filename:     # e.g. device=3 with no npu3
                message = f"npu delegate: {exc.filename}: {exc.strerror}"
            elif isinstance(exc, DeviceChoiceError):          # device=1 with NPU_VISIBLE_DEVICES=3
                message = f"npu delegate: {exc.strerror}"
            else:
                message = f"npu delegate: {type(exc).__name__}: {exc}"
            if "npu delegate" not in message:
                message = f"npu delegate: {message}"
            if report_error != ffi.NULL:
                report_error(ffi.new("char[]", message.encode(errors="replace")))
            else:
                print(message, file=sys.stderr)
            return ffi.NULL
        with _lock:
            _live[_address(ffi, delegate.struct)] = delegate
        return delegate.struct

    @ffi.def_extern()
    def npu_delegate_destroy_py(struct):
        with _lock:
            delegate = _live.pop(_address(ffi, struct), None)
        if delegate is not None:
            _kept_structs.append(delegate.struct)
            try:
                delegate.destroy()
            except Exception as exc:  # noqa: BLE001 - the caller is going away: log, do not crash
                log.error("npu delegate: closing the device failed: %s", exc)

    @ffi.def_extern(error=K_DELEGATE_ERROR)
    def npu_delegate_prepare(context, struct):
        delegate = ffi.from_handle(struct.data_)
        try:
            return delegate.prepare(context)
        except Exception as exc:  # noqa: BLE001 - the interpreter gets an error status, not a crash
            _report(ffi, context, f"npu delegate: cannot prepare the model: {type(exc).__name__}: {exc}")
            return K_DELEGATE_ERROR

    @ffi.def_extern()
    def npu_kernel_init(context, buffer, length):
        try:
            params = ffi.cast("TfLiteDelegateParams*", buffer)
            delegate = ffi.from_handle(params.delegate.data_)
            nodes = [delegate.nodes[int(params.nodes_to_replace.data[i])]
                     for i in range(params.nodes_to_replace.size)]
            inputs = [int(params.input_tensors.data[i]) for i in range(params.input_tensors.size)]
            outputs = [int(params.output_tensors.data[i]) for i in range(params.output_tensors.size)]
            partition = _Partition(delegate, nodes, inputs, outputs)
            handle = ffi.new_handle(partition)
            with _lock:
                _live[_address(ffi, handle)] = (handle, partition)
            return handle
        except Exception as exc:  # noqa: BLE001
            _report(ffi, context, f"npu delegate: cannot create a partition: {type(exc).__name__}: {exc}")
            return ffi.NULL

    @ffi.def_extern()
    def npu_kernel_free(context, buffer):
        if buffer == ffi.NULL:
            return
        with _lock:
            entry = _live.pop(_address(ffi, buffer), None)
        if entry is not None:
            try:
                entry[1].free()
            except Exception as exc:  # noqa: BLE001 - the interpreter is going away: log, do not crash
                log.error("npu delegate: freeing a partition failed: %s", exc)

    def _partition(node) -> _Partition | None:
        if node.user_data == ffi.NULL:
            return None
        return ffi.from_handle(node.user_data)

    def _status(context, step) -> int:
        """Run a partition's prepare/invoke step; an exception becomes LiteRT's error status
        with its message reported through ``context``."""
        try:
            step(ffi, context)
            return K_OK
        except Exception as exc:  # noqa: BLE001
            _report(ffi, context, f"npu delegate: {type(exc).__name__}: {exc}")
            return K_ERROR

    @ffi.def_extern(error=K_ERROR)
    def npu_kernel_prepare(context, node):
        partition = _partition(node)
        if partition is None:
            _report(ffi, context, "npu delegate: a partition failed to initialize")
            return K_ERROR
        return _status(context, partition.prepare)

    @ffi.def_extern(error=K_ERROR)
    def npu_kernel_invoke(context, node):
        partition = _partition(node)
        if partition is None:
            return K_ERROR
        return _status(context, partition.invoke)
