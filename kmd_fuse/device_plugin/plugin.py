"""The device plugin's service: discovery, health, ListAndWatch, Allocate, registration.

- Discovery reads the attribute trees (kmd_fuse.served_devices), every ``poll_s`` (1 s by
  default: Intel's NPU plugin rescans every 5 s); a device seen once stays listed, so a
  stopped daemon (whose tree goes with it) turns its device Unhealthy rather than making
  it vanish while pods hold it.
- Health is the daemon's (alive, device announced). ListAndWatch sends the whole list
  again whenever an ID's health changes, as the API asks.
- Sharing: with ``shared > 1`` each device is advertised as that many IDs
  (``npu3-0`` ... ``npu3-<k-1>``), as Intel's ``-shared-dev-num``: k containers may then
  be given the same device, which the driver's contexts keep apart.
- Allocate answers each container with the CDI names of its devices (a CDI-aware runtime
  applies ``npu-kmd cdi``'s spec) and, for runtimes without CDI, the same mounts and
  variables as the spec (kmd_fuse.cdi.container_edits), ``NPU_VISIBLE_DEVICES`` computed
  over the whole allocation.
- The plugin serves on ``<plugin_dir>/<endpoint>`` and then registers on
  ``<plugin_dir>/kubelet.sock``. A kubelet that restarts removes every socket in the
  directory: when ours is gone the plugin serves and registers again.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from kmd_fuse import cdi
from kmd_fuse.device_plugin import deviceplugin_pb2 as api
from kmd_fuse.device_plugin import deviceplugin_pb2_grpc as api_grpc
from kmd_fuse.served_devices import device_numbers, served_device

API_VERSION = "v1beta1"
RESOURCE = cdi.KIND                          # npu-emu.io/npu
ENDPOINT = "npu-emu.sock"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
REGISTER_TIMEOUT_S = 10.0

log = logging.getLogger("npu-device-plugin")


def device_ids(index: int, shared: int) -> list[str]:
    """The IDs under which ``npu<index>`` is advertised."""
    name = cdi.device_name(index)
    return [name] if shared == 1 else [f"{name}-{k}" for k in range(shared)]


def index_of(device_id: str) -> int | None:
    """The device number an advertised ID names (``npu3`` and ``npu3-1`` name 3), None if none."""
    if not device_id.startswith("npu"):
        return None
    number = device_id[3:].split("-", 1)[0]
    return int(number) if number.isdigit() else None


class NpuDevicePlugin(api_grpc.DevicePluginServicer):
    """The DevicePlugin service over one devroot's devices."""

    def __init__(self, root: Path, sys_root: Path, *, shared: int = 1, poll_s: float = 1.0,
                 container_devroot: str = cdi.CONTAINER_DEVROOT) -> None:
        if shared < 1:
            raise ValueError(f"shared: {shared}: at least 1 ID per device")
        self.root, self.sys_root, self.shared, self.poll_s = root, sys_root, shared, poll_s
        self.container_devroot = container_devroot
        self._known: set[int] = set()
        self._health: dict[int, bool] = {}
        self._version = 0
        self._changed = threading.Condition()
        self.stopping = threading.Event()
        self.refresh()

    # ---- discovery and health ----

    def refresh(self) -> bool:
        """Read the devices' state now; True (and ListAndWatch streams wake) if it changed."""
        self._known.update(device_numbers(self.sys_root))
        health = {index: served_device(self.root, index).healthy for index in sorted(self._known)}
        with self._changed:
            if health == self._health:
                return False
            for index in health:
                if health[index] != self._health.get(index):
                    log.info("npu%d: %s", index, HEALTHY if health[index] else UNHEALTHY)
            self._health = health
            self._version += 1
            self._changed.notify_all()
            return True

    def stop(self) -> None:
        """End ``serve`` and every ListAndWatch stream (safe from a signal handler's thread)."""
        self.stopping.set()
        with self._changed:
            self._changed.notify_all()

    def watch(self) -> None:
        """Refresh every ``poll_s`` until ``stopping`` is set (the plugin's watcher thread)."""
        while not self.stopping.wait(self.poll_s):
            self.refresh()

    def _devices(self) -> list:
        return [api.Device(ID=device_id, health=HEALTHY if healthy else UNHEALTHY)
                for index, healthy in self._health.items() for device_id in device_ids(index, self.shared)]

    # ---- the service ----

    def GetDevicePluginOptions(self, request, context):
        return api.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context) -> Iterator:
        seen = -1
        while context.is_active() and not self.stopping.is_set():
            with self._changed:
                if seen == self._version:
                    self._changed.wait(1.0)      # woken by a change; the timeout only notices a gone client
                    continue
                seen, devices = self._version, self._devices()
            yield api.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        """Prefer distinct devices (with sharing, IDs of devices not yet chosen first)."""
        responses = []
        for want in request.container_requests:
            chosen = list(want.must_include_deviceIDs)
            taken = {index_of(device_id) for device_id in chosen}
            rest = [d for d in want.available_deviceIDs if d not in chosen]
            while rest and len(chosen) < want.allocation_size:
                fresh = [d for d in rest if index_of(d) not in taken]
                device_id = (fresh or rest)[0]
                rest.remove(device_id)
                chosen.append(device_id)
                taken.add(index_of(device_id))
            responses.append(api.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return api.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        responses = []
        for want in request.container_requests:
            indices: list[int] = []
            for device_id in want.devices_ids:
                index = index_of(device_id)
                if index is None or index not in self._known or device_id not in device_ids(index, self.shared):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{device_id!r}: no such device ID")
                if index not in indices:
                    indices.append(index)
            devices = [served_device(self.root, index) for index in sorted(indices)]
            edits = cdi.container_edits(devices, self.container_devroot)
            responses.append(api.ContainerAllocateResponse(
                envs=edits.env,
                mounts=[api.Mount(container_path=inside, host_path=host, read_only=read_only)
                        for host, inside, read_only in edits.mounts],
                cdi_devices=[api.CDIDevice(name=cdi.qualified_name(d.index)) for d in devices]))
        return api.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        return api.PreStartContainerResponse()


def register(plugin_dir: Path, shared: int) -> None:
    """Announce the plugin to the kubelet (grpc.RpcError if it refuses or does not answer)."""
    with grpc.insecure_channel(f"unix://{plugin_dir / KUBELET_SOCKET}") as channel:
        api_grpc.RegistrationStub(channel).Register(
            api.RegisterRequest(version=API_VERSION, endpoint=ENDPOINT, resource_name=RESOURCE,
                                options=api.DevicePluginOptions(get_preferred_allocation_available=True)),
            timeout=REGISTER_TIMEOUT_S, wait_for_ready=True)


def serve(plugin: NpuDevicePlugin, plugin_dir: Path) -> None:
    """Serve ``plugin`` on ``<plugin_dir>/npu-emu.sock`` and register it; again whenever
    the socket is removed (a kubelet restart), until ``plugin.stopping`` is set."""
    watcher = threading.Thread(target=plugin.watch, name="npu-health", daemon=True)
    watcher.start()
    socket_path = plugin_dir / ENDPOINT
    try:
        while not plugin.stopping.is_set():
            socket_path.unlink(missing_ok=True)             # a previous run's
            # one thread per ListAndWatch stream the kubelet holds, plus the unary calls
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="npu-grpc"))
            api_grpc.add_DevicePluginServicer_to_server(plugin, server)
            server.add_insecure_port(f"unix://{socket_path}")
            server.start()
            try:
                register(plugin_dir, plugin.shared)
                log.info("registered %s on %s (endpoint %s)", RESOURCE, plugin_dir / KUBELET_SOCKET, ENDPOINT)
                identity = os.stat(socket_path).st_ino
                while not plugin.stopping.wait(plugin.poll_s):
                    if not _same_socket(socket_path, identity):
                        log.info("%s was removed (kubelet restarted): registering again", socket_path)
                        break
            except grpc.RpcError as exc:
                log.error("registration failed: %s; retrying", exc.details() if hasattr(exc, "details") else exc)
                plugin.stopping.wait(plugin.poll_s * 5)
            finally:
                server.stop(grace=1.0).wait()
    finally:
        plugin.stop()
        watcher.join()
        socket_path.unlink(missing_ok=True)


def _same_socket(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False
