"""The kubelet's side of the device plugin API, for tests and benchmarks where no kubelet
runs: a real gRPC server of ``Registration`` on ``<plugin dir>/kubelet.sock`` that records
what plugins register, a real ``npu-kmd device-plugin`` process, and a client of the
plugin's ``DevicePlugin`` service that follows ListAndWatch in a thread, as the kubelet's
device manager does."""
from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from kmd_fuse.device_plugin import deviceplugin_pb2 as api
from kmd_fuse.device_plugin import deviceplugin_pb2_grpc as api_grpc
from kmd_fuse.device_plugin.plugin import ENDPOINT, KUBELET_SOCKET

WAIT_S = 60.0


class _Registration(api_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.requests: queue.Queue = queue.Queue()

    def Register(self, request, context):
        self.requests.put(request)
        return api.Empty()


class KubeletSide:
    """Serves Registration in ``plugin_dir`` (a context manager); ``registered()`` is the
    next RegisterRequest a plugin sent."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self._service = _Registration()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_grpc.add_RegistrationServicer_to_server(self._service, self._server)
        self._server.add_insecure_port(f"unix://{plugin_dir / KUBELET_SOCKET}")

    def __enter__(self) -> KubeletSide:
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop(grace=None).wait()

    def registered(self, timeout: float = WAIT_S):
        return self._service.requests.get(timeout=timeout)


def start_plugin(devroot: Path, plugin_dir: Path, *extra: str) -> subprocess.Popen:
    """``npu-kmd device-plugin`` for ``devroot``, serving in ``plugin_dir`` (stop_plugin ends it)."""
    return subprocess.Popen([sys.executable, "-m", "kmd_fuse.cli", "device-plugin", "--devroot", str(devroot),
                             "--plugin-dir", str(plugin_dir), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_plugin(proc: subprocess.Popen) -> str:
    """SIGTERM the plugin, reap it (SIGKILL after 30 s); its output."""
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


class PluginClient:
    """A channel to the plugin's socket, with ListAndWatch followed in a thread: ``lists``
    receives each device list as {ID: health}."""

    def __init__(self, plugin_dir: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{plugin_dir / ENDPOINT}")
        self.stub = api_grpc.DevicePluginStub(self.channel)
        self.lists: queue.Queue = queue.Queue()
        self._stream = self.stub.ListAndWatch(api.Empty(), wait_for_ready=True)
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            for response in self._stream:
                self.lists.put({device.ID: device.health for device in response.devices})
        except grpc.RpcError:
            pass                         # cancelled by close(), or the plugin went away

    def wait_for_list(self, predicate, timeout: float = WAIT_S) -> dict:
        """The first device list (from now on) for which ``predicate`` holds; AssertionError
        with the last list seen if none does within ``timeout``."""
        last, deadline = None, time.monotonic() + timeout
        try:
            while True:
                last = self.lists.get(timeout=max(0.0, deadline - time.monotonic()))
                if predicate(last):
                    return last
        except queue.Empty:
            raise AssertionError(f"waited {timeout:.0f} s for a device list; last seen: {last}") from None

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(WAIT_S)
        self.channel.close()
