"""Cache of compiled models, keyed by content hash.

The key covers the model bytes, the compile options, the loadable format version and the
compiler's own source, so a changed model, option, format or compiler never hits a stale
entry. Entries are loadable files
under ``<cache dir>/compiled/``, written atomically; an entry that no longer parses
(truncated, corrupted, old format, nothing to run) is removed and reported as a miss.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import loadable as _loadable
from .frozen_inputs import frozen_key
from .progress import Progress

__all__ = ["CompileCache", "cache_key", "compile_cached", "user_cache_dir"]


def user_cache_dir() -> Path:
    """The user's cache directory (``$NPU_CACHE_DIR`` or ``~/.cache/npu-emu``), created if missing.

    Compiled models go under ``compiled/``; the tools keep their downloads beside them.
    """
    root = Path(os.environ.get("NPU_CACHE_DIR") or Path.home() / ".cache" / "npu-emu")
    root.mkdir(parents=True, exist_ok=True)
    return root


#: What decides the loadable a model compiles to, besides the model and the options: the
#: compiler, the chip's descriptor formats and the loadable's layout. Their source is hashed
#: into every key, so a compiler that changed in any way (an upgrade, a local edit) never
#: hands out what an older one compiled; a revision number bumped by hand was forgotten.
_COMPILER_SOURCES = ("compiler", "../npu_hw", "loadable.py", "loadable_layout.py")


def compiler_sources() -> list[Path]:
    """The source files whose change may change a loadable (see ``_COMPILER_SOURCES``)."""
    root = Path(__file__).resolve().parents[1]          # libnpu/
    files: list[Path] = []
    for entry in _COMPILER_SOURCES:
        path = (root / entry).resolve()
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


@functools.cache
def compiler_fingerprint() -> str:
    """sha256 over ``compiler_sources()`` (read once per process: ~70 files, ~10 ms)."""
    h = hashlib.sha256()
    for path in compiler_sources():
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_key(model: bytes, options: Mapping[str, Any] | None = None) -> str:
    """sha256 over the model bytes, the options (canonical JSON), the format version and
    the compiler's own source (``compiler_fingerprint``)."""
    h = hashlib.sha256()
    h.update(b"npu-emu compile cache\0")
    h.update(json.dumps(list(_loadable.VERSION)).encode())
    h.update(f"compiler {compiler_fingerprint()}\0".encode())
    h.update(json.dumps(dict(options or {}), sort_keys=True, default=str).encode())
    h.update(b"\0")
    h.update(model)
    return h.hexdigest()


class CompileCache:
    """Compiled models on disk: ``get``/``put`` by key, or ``get_or_compile``."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else user_cache_dir() / "compiled"
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"bad cache key {key!r}")
        return self.root / f"{key}.nlb"

    def get(self, key: str) -> _loadable.Loadable | None:
        p = self.path(key)
        try:
            found = _loadable.Loadable.load(p)
            found.check_runnable()     # an empty model cached before empty models were refused
            return found
        except FileNotFoundError:
            return None
        except _loadable.LoadableError:
            p.unlink(missing_ok=True)  # damaged or outdated: recompile
            return None

    def put(self, key: str, model: _loadable.Loadable) -> Path:
        p = self.path(key)
        model.save(p)
        return p

    def get_or_compile(self, model: bytes, options: Mapping[str, Any] | None,
                       compile_fn: Callable[[], _loadable.Loadable]) -> tuple[_loadable.Loadable, bool]:
        """The cached loadable for ``model``+``options``, compiling (and storing) on a miss.

        Returns ``(loadable, hit)``.
        """
        key = cache_key(model, options)
        found = self.get(key)
        if found is not None:
            return found, True
        built = compile_fn()
        self.put(key, built)
        return built, False


Dataset = list[Mapping[str, np.ndarray] | Sequence[np.ndarray]]


def _dataset_digest(dataset: Dataset | None) -> str | None:
    if dataset is None:
        return None
    h = hashlib.sha256()
    for feeds in dataset:
        arrays = feeds.values() if isinstance(feeds, Mapping) else feeds
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def compile_cached(model: str | os.PathLike | bytes,
                   dataset: Iterable[Mapping[str, np.ndarray] | Sequence[np.ndarray]] | None = None, *,
                   cache: CompileCache | None = None, progress: Progress | None = None,
                   **quantize_options: Any) -> tuple[_loadable.Loadable, bool]:
    """:func:`libnpu.compiler.lower.compile_model` through the cache; returns (loadable, hit).

    The key covers the model bytes, the quantization options and the calibration data;
    ``progress`` (not part of the key) hears the stages of a compile (a hit reports none).
    """
    # Lazy: the compiler pulls in onnx and tflite (~1 s), and the npu CLI imports this module at
    # start-up (user_cache_dir) for every command.
    from .lower import compile_model
    kind = None  # bytes: told apart by the TFLite file identifier
    if isinstance(model, (str, os.PathLike)):
        data, kind = Path(model).read_bytes(), {".onnx": "onnx", ".tflite": "tflite"}.get(Path(model).suffix)
    else:
        data = bytes(model)
    dataset = list(dataset) if dataset is not None else None
    if quantize_options.get("freeze_inputs") is not None:    # arrays printed in full in the key
        quantize_options["freeze_inputs"] = frozen_key(quantize_options["freeze_inputs"])
    if quantize_options.get("ops") is not None:      # an allow-list: one key whatever its order or type
        quantize_options["ops"] = sorted(set(quantize_options["ops"]))
    options = dict(quantize_options, calibration=_dataset_digest(dataset))
    cache = cache or CompileCache()
    return cache.get_or_compile(data, options, lambda: compile_model(data, dataset, kind=kind, progress=progress,
                                                                        **quantize_options))
