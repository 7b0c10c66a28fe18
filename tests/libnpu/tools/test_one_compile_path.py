"""One compile path: the compiler's progress callback, and ``npu compile`` writing what ``libnpu.load`` compiles."""
from __future__ import annotations

from libnpu.compiler.cache import CompileCache, compile_cached
from libnpu.tools.cli import main

from .test_cli import _onnx_model


def test_progress_hears_every_stage_and_each_calibration_run(tmp_path):
    heard = []
    _, hit = compile_cached(_onnx_model(tmp_path / "small.onnx"), cache=CompileCache(tmp_path / "c"),
                            progress=lambda *call: heard.append(call), random_count=3)
    assert not hit
    assert heard == [("import", 0, 1), ("import", 1, 1), ("step int8", 0, 1), ("optimize", 0, 1), ("optimize", 1, 1),
                     ("calibrate", 0, 3), ("calibrate", 1, 3), ("calibrate", 2, 3), ("calibrate", 3, 3),
                     ("quantize", 0, 1), ("quantize", 1, 1), ("measure", 0, 1), ("measure", 1, 1),
                     ("step int8", 1, 1), ("lower", 0, 1), ("lower", 1, 1)]
    heard.clear()
    _, hit = compile_cached(_onnx_model(tmp_path / "small.onnx"), cache=CompileCache(tmp_path / "c"),
                            progress=lambda *call: heard.append(call), random_count=3)
    assert hit and heard == []          # a cache hit compiles nothing


def test_an_int8_model_skips_the_quantizer_stages(resnet8_path, tmp_path):
    heard = []
    compile_cached(resnet8_path, cache=CompileCache(tmp_path / "c"), progress=lambda *call: heard.append(call))
    assert [stage for stage, done, _ in heard if done == 0] == ["import", "lower"]


def test_npu_compile_writes_the_loadable_libnpu_load_compiles(tmp_path, capsys):
    """The CLI runs the library's compile: same cache key, same bytes - whoever compiles first."""
    model = _onnx_model(tmp_path / "small.onnx")
    out = tmp_path / "m.nlb"
    assert main(["compile", str(model), "-o", str(out), "--cache-dir", str(tmp_path / "cli"), "--json"]) == 0
    capsys.readouterr()
    library, hit = compile_cached(model, cache=CompileCache(tmp_path / "lib"))
    assert not hit
    library.save(tmp_path / "lib.nlb")
    assert out.read_bytes() == (tmp_path / "lib.nlb").read_bytes()
    _, hit = compile_cached(model, cache=CompileCache(tmp_path / "cli"))
    assert hit                          # libnpu.load after npu compile: a cache hit


def test_libnpu_load_hears_the_same_progress(npu, tmp_path):
    import libnpu
    heard = []
    model = libnpu.load(_onnx_model(tmp_path / "small.onnx"), devroot=npu.devroot, cache_dir=tmp_path / "c",
                        progress=lambda *call: heard.append(call), random_count=2)
    try:
        assert [stage for stage, done, _ in heard if done == 0] == ["import", "step int8", "optimize", "calibrate",
                                                                     "quantize", "measure", "lower"]
        assert model.load_info["cache_hit"] is False
    finally:
        model.close()
