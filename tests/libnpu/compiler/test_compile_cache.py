import pytest

from libnpu.compiler.cache import CompileCache, cache_key
from libnpu.compiler.lower import lower
from libnpu.compiler.memplan import plan_memory
from libnpu.compiler.tflite_import import import_tflite


def test_get_or_compile_hits_after_first_compile(resnet8_path, tmp_path):
    data = resnet8_path.read_bytes()
    cache = CompileCache(tmp_path)
    calls = []

    def compile_fn():
        calls.append(1)
        return lower(import_tflite(data, "resnet8"), metadata={"options": "default"})

    first, hit1 = cache.get_or_compile(data, {"io": "int8"}, compile_fn)
    second, hit2 = cache.get_or_compile(data, {"io": "int8"}, compile_fn)
    assert (hit1, hit2) == (False, True) and len(calls) == 1
    assert [t.name for t in second.tensors] == [t.name for t in first.tensors]
    assert bytes(second.regions[0].content) == bytes(first.regions[0].content)
    # other options or other bytes: other keys
    assert cache_key(data, {"io": "float32"}) != cache_key(data, {"io": "int8"})
    assert cache_key(data[:-1] + b"\0", {"io": "int8"}) != cache_key(data, {"io": "int8"})
    assert cache_key(data, {"a": 1, "b": 2}) == cache_key(data, {"b": 2, "a": 1})


def test_damaged_entry_is_a_miss_and_removed(resnet8_path, tmp_path):
    data = resnet8_path.read_bytes()
    cache = CompileCache(tmp_path)
    g = import_tflite(data, "resnet8")
    key = cache_key(data)
    path = cache.put(key, plan_memory(g).to_loadable(g, []))
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x55
    path.write_bytes(bytes(raw))
    assert cache.get(key) is None and not path.exists()
    cache.put(key, plan_memory(g).to_loadable(g, []))      # no tasks: cached before such models were refused
    assert cache.get(key) is None and not cache.path(key).exists()
    with pytest.raises(ValueError, match="bad cache key"):
        cache.get("../../etc/passwd")


def test_compile_cached_keys_on_calibration_data(blazeface_path, tmp_path, monkeypatch):
    import numpy as np

    import libnpu.compiler.lower as lower_mod
    from libnpu.compiler.cache import compile_cached
    cache = CompileCache(tmp_path)
    calls = []
    real = lower_mod.compile_model
    monkeypatch.setattr(lower_mod, "compile_model", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(0)
    data = [[rng.uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)]]
    ld1, hit1 = compile_cached(blazeface_path, data, cache=cache, recipe="fast")
    ld2, hit2 = compile_cached(blazeface_path, data, cache=cache, recipe="fast")
    other = [[data[0][0] * 0.5]]
    _, hit3 = compile_cached(blazeface_path, other, cache=cache, recipe="fast")
    assert (hit1, hit2, hit3) == (False, True, False) and len(calls) == 2
    assert ld2.to_bytes() == ld1.to_bytes()


def test_writing_an_entry_follows_no_link_planted_in_the_cache(resnet8_path, tmp_path):
    """A cache directory others can write (a shared cache_dir, the delegate's option): a link
    planted at the name of the temporary file must not make the writer write through it."""
    import os
    data = resnet8_path.read_bytes()
    cache = CompileCache(tmp_path / "shared")
    g = import_tflite(data, "resnet8")
    key = cache_key(data)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    final = cache.path(key)
    for pid in range(os.getpid() - 2, os.getpid() + 3):        # pids are easy to guess
        final.with_name(f"{final.name}.{pid}.tmp").symlink_to(victim)
    cache.put(key, lower(g, metadata={"options": "default"}))
    assert victim.read_text() == "precious"
    assert cache.get(key) is not None and not final.is_symlink()


def test_the_key_follows_the_compilers_own_source(monkeypatch):
    """A compiler that changed (an upgrade, a local edit) never hands out an old compile:
    the key hashes the compiler's source, the descriptor formats and the loadable layout."""
    from libnpu.compiler import cache
    names = {path.name for path in cache.compiler_sources()}
    assert {"quantizer.py", "placement.py", "ops.py", "loadable.py", "loadable_layout.py"} <= names
    before = cache.cache_key(b"model", {"a": 1})
    monkeypatch.setattr(cache, "compiler_fingerprint", lambda: "another compiler")
    assert cache.cache_key(b"model", {"a": 1}) != before
