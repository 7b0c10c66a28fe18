import pytest

from libnpu.compiler.cache import CompileCache, cache_key
from libnpu.compiler.memplan import plan_memory
from libnpu.compiler.tflite_import import import_tflite


def test_get_or_compile_hits_after_first_compile(resnet8_path, tmp_path):
    data = resnet8_path.read_bytes()
    cache = CompileCache(tmp_path)
    calls = []

    def compile_fn():
        calls.append(1)
        g = import_tflite(data, "resnet8")
        return plan_memory(g).to_loadable(g, [], {"options": "default"})

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
    with pytest.raises(ValueError, match="bad cache key"):
        cache.get("../../etc/passwd")
