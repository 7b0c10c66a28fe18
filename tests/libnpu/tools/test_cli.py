"""``npu compile``, ``npu run`` and ``npu bench model`` through the CLI's main()."""
from __future__ import annotations

import json

import numpy as np
import pytest

from libnpu.loadable import Loadable
from libnpu.tools.cli import main


def _onnx_model(path, *, op: str = "Relu"):
    """A small float ONNX model: conv -> ``op`` (output 0) -> max pool (output 1)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c"], ["y1"], name="act0"),
             helper.make_node("MaxPool", ["y1"], ["y2"], name="pool0", kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, 8, 8]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4, 4, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_run_save_int8_model_matches_litert(npu, resnet8_path, litert_ok, tmp_path, capsys):
    from libnpu.tools.models import LiteRT
    x = np.random.default_rng(5).integers(-128, 128, (1, 32, 32, 3)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    assert main(["run", str(resnet8_path), "--input", str(tmp_path / "x.npy"), "--save", str(out), "--json",
                 "--repeat", "2", "--devroot", str(npu.devroot), "--cache-dir", str(tmp_path / "c")]) == 0
    report = _json(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["output_0.npy"]
    y = np.load(out / "output_0.npy")
    assert y.dtype == np.int8 and y.shape == (1, 10)
    np.testing.assert_array_equal(y, LiteRT(resnet8_path, "reference").run([x])[0])
    assert report["inputs"][0]["source"].endswith("x.npy") and len(report["inferences"]) == 2
    assert all(r["latency_ms"] > 0 and r["device_time_ms"] > 0 for r in report["inferences"])


def test_run_float_model_fresh_then_cached(npu, tmp_path, capsys):
    model = _onnx_model(tmp_path / "small.onnx")
    out = tmp_path / "out"
    assert main(["run", str(model), "--save", str(out), "--json", "--fresh", "--repeat", "1",
                 "--devroot", str(npu.devroot)]) == 0
    report = _json(capsys)
    # first-ever load compiles (empty cache); the second load in the same run hits the cache
    assert report["first_load"]["cache_hit"] is False and report["cached_load"]["cache_hit"] is True
    assert report["cached_load"]["compile_s"] < report["first_load"]["compile_s"]
    assert set(report["first_load"]["compile_stages_s"]) == {"import", "step int8", "optimize", "calibrate",
                                                             "quantize", "measure", "lower"}
    files = sorted(p.name for p in out.iterdir())
    assert files == ["output_0.npy", "output_1.npy"]
    y1, y2 = np.load(out / "output_0.npy"), np.load(out / "output_1.npy")
    assert y1.dtype == y2.dtype == np.float32           # float I/O model: float outputs
    assert y1.shape == (1, 4, 8, 8) and y2.shape == (1, 4, 4, 4)
    assert y1.min() >= 0                                 # after RELU
    np.testing.assert_allclose(y2, y1.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5)), atol=1e-6)  # pool of output 0
    # A loadable runs too: no compile at all.
    assert main(["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--cache-dir", str(tmp_path / "c"),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["run", str(tmp_path / "m.nlb"), "--json", "--repeat", "1", "--devroot", str(npu.devroot)]) == 0
    assert _json(capsys)["first_load"]["cache_hit"] is None


def test_run_input_errors(npu, resnet8_path, tmp_path, capsys):
    np.save(tmp_path / "wrong.npy", np.zeros((1, 31, 32, 3), np.int8))
    base = ["run", str(resnet8_path), "--devroot", str(npu.devroot), "--cache-dir", str(tmp_path / "c")]
    assert main(base + ["--input", str(tmp_path / "wrong.npy")]) == 2
    assert "does not fit input input_1_int8" in capsys.readouterr().err
    assert main(base + ["--input", str(tmp_path / "wrong.npy"), str(tmp_path / "wrong.npy")]) == 2
    assert "takes 1 inputs" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.tflite"), "--devroot", str(npu.devroot)]) == 2
    assert "no such model file" in capsys.readouterr().err


def test_compile_writes_loadable_with_plan_and_caches(tmp_path, capsys):
    model = _onnx_model(tmp_path / "small.onnx")
    np.save(tmp_path / "cal.npy", np.random.default_rng(1).normal(size=(4, 1, 3, 8, 8)).astype(np.float32))
    args = ["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--calibration", str(tmp_path / "cal.npy"),
            "--cache-dir", str(tmp_path / "c"), "--json"]
    assert main(args) == 0
    first = _json(capsys)
    assert first["cache_hit"] is False and first["calibration"] == "file"
    plan = first["plan"]
    assert 0 < plan["activation_arena_bytes"] <= plan["activation_tensors_bytes"]
    assert plan["bytes_by_kind"]["input"] >= 3 * 8 * 8 and plan["tasks"] >= 3
    ld = Loadable.load(tmp_path / "m.nlb")
    assert [t.shape for t in ld.outputs()] == [(1, 4, 8, 8), (1, 4, 4, 4)]
    # the default recipe calibrates on 2 of the 4 samples and measures the outputs on the other 2
    assert ld.metadata["calibration"] == {"method": "minmax", "runs": 2, "random": False, "bias_correction": False}
    assert ld.metadata["fidelity"]["samples"] == 2 and first["fidelity"] == ld.metadata["fidelity"]
    assert main(args) == 0
    assert _json(capsys)["cache_hit"] is True
    # Text mode prints the memory plan.
    assert main(args[:-1]) == 0
    text = capsys.readouterr().out
    assert "memory plan:" in text and "saved by reusing buffers" in text


def test_compile_png_calibration_directory(blazeface_path, astronaut, tmp_path, capsys):
    from libnpu.tools.vision import write_png
    cal = tmp_path / "pictures"
    cal.mkdir()
    write_png(cal / "a.png", astronaut[:256, 128:384])
    write_png(cal / "b.png", astronaut[::2, ::2])
    assert main(["compile", str(blazeface_path), "-o", str(tmp_path / "bf.nlb"), "--calibration", str(cal),
                 "--cache-dir", str(tmp_path / "c"), "--json", "--recipe", "fast"]) == 0
    report = _json(capsys)
    assert report["stages_s"]["calibrate"] > 0
    assert Loadable.load(tmp_path / "bf.nlb").metadata["calibration"]["runs"] == 2


def test_compile_with_the_models_preprocessing_and_a_report(blazeface_path, astronaut, tmp_path, capsys):
    from libnpu.tools.vision import write_png
    cal = tmp_path / "pictures"
    cal.mkdir()
    write_png(cal / "a.png", astronaut[:256, 128:384])
    write_png(cal / "b.png", astronaut[::2, ::2])
    args = ["compile", str(blazeface_path), "-o", str(tmp_path / "bf.nlb"), "--calibration", str(cal),
            "--cache-dir", str(tmp_path / "c"), "--input-range", "0,1", "--method", "mse", "--bias-correction",
            "--report", "--no-progress", "--recipe", "fast"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "quantization: mse calibration on 2 samples, bias correction" in text
    assert "the 10 worst of" in text and "own SQNR" in text
    meta = Loadable.load(tmp_path / "bf.nlb").metadata
    assert meta["calibration"] == {"method": "mse", "runs": 2, "random": False, "bias_correction": True}
    assert len(meta["layer_errors"]) > 30
    assert main(args + ["--json"]) == 0
    report = _json(capsys)
    assert report["cache_hit"] is True and report["layer_errors"] == meta["layer_errors"]
    # An int8 model has nothing to report; the section says so.
    assert main(["compile", "resnet8", "-o", str(tmp_path / "r.nlb"), "--cache-dir", str(tmp_path / "c"),
                 "--report", "--no-progress"]) == 0
    assert "an int8 model, compiled as it is" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["--std", "2"], "--std goes with --mean"),
    (["--mean", "127", "--input-range", "0,1"], "not both"),
    (["--input-range", "1,0"], "LO < HI"),
    (["--input-range", "0"], "takes 2 numbers"),
    (["--mean", "a,b"], "comma-separated numbers"),
    (["--mean", "1", "--std", "0"], "must not be 0"),
    (["--percentile", "99.9"], "--percentile goes with --method percentile"),
    (["--method", "percentile", "--percentile", "20"], "(50, 100]"),
])
def test_preprocessing_usage_errors(extra, message, tmp_path, capsys):
    model = _onnx_model(tmp_path / "small.onnx")
    np.save(tmp_path / "cal.npy", np.zeros((1, 1, 3, 8, 8), np.float32))
    assert main(["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--calibration", str(tmp_path / "cal.npy"),
                 "--cache-dir", str(tmp_path / "c"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_preprocessing_without_calibration_is_a_usage_error(tmp_path, capsys):
    model = _onnx_model(tmp_path / "small.onnx")
    assert main(["compile", str(model), "-o", str(tmp_path / "m.nlb"), "--input-range", "0,1"]) == 2
    assert "give --calibration" in capsys.readouterr().err


def test_picture_preprocessing_values():
    from libnpu.tools.models import ModelSpecError, preprocess_picture
    pixels = np.full((4, 6, 3), 51, np.uint8)
    pixels[..., 1] = 255
    shape = (1, 2, 3, 3)
    np.testing.assert_allclose(preprocess_picture(pixels, shape, (0.0, 1.0))[0, 0, 0], [0.2, 1.0, 0.2])
    np.testing.assert_allclose(preprocess_picture(pixels, shape)[0, 0, 0], [-0.6, 1.0, -0.6])
    got = preprocess_picture(pixels, shape, mean=(51.0, 127.5, 0.0), std=(1.0, 127.5, 51.0))
    np.testing.assert_allclose(got[0, 0, 0], [0.0, 1.0, 1.0])
    grey = preprocess_picture(np.full((4, 6), 255, np.uint8), shape, (0.0, 1.0))
    assert grey.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(grey, 1.0, rtol=1e-6)
    with pytest.raises(ModelSpecError, match="std has 2 values"):
        preprocess_picture(pixels, shape, mean=(0,), std=(1, 2))


def test_compile_errors(tmp_path, capsys):
    """1: the model was found and cannot be compiled; 2: the command line names nothing usable."""
    out = ["-o", str(tmp_path / "x.nlb"), "--cache-dir", str(tmp_path / "c")]
    sin = str(_onnx_model(tmp_path / "sin.onnx", op="Sin"))
    assert main(["compile", sin, "--strict"] + out) == 1                # strict: no CPU fallback
    err = capsys.readouterr().err
    assert "(missing: Sin)" in err and "Sin (op 1): no NPU operator" in err   # names the op and the node
    assert main(["compile", str(tmp_path / "none.onnx")] + out) == 2
    assert "no such model file" in capsys.readouterr().err
    (tmp_path / "junk.tflite").write_bytes(b"\0" * 64)
    assert main(["compile", str(tmp_path / "junk.tflite")] + out) == 1
    assert "TFL3" in capsys.readouterr().err
    good = _onnx_model(tmp_path / "small.onnx")
    np.save(tmp_path / "bad.npy", np.zeros((5, 7), np.float32))
    assert main(["compile", str(good), "--calibration", str(tmp_path / "bad.npy")] + out) == 2
    assert "does not split into samples" in capsys.readouterr().err
    assert main(["compile", str(good), "--calibration", str(tmp_path / "bad.npy"),
                 "--random-calibration", "2"] + out) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "m.nlb").write_bytes(b"x")
    assert main(["compile", str(tmp_path / "m.nlb")] + out) == 2
    assert "already a compiled loadable" in capsys.readouterr().err
    assert not (tmp_path / "x.nlb").exists()


def test_bench_model_json(npu, resnet8_path, tmp_path, capsys):
    assert main(["bench", "model", str(resnet8_path), "--seconds", "0.2", "--requests", "2", "--json",
                 "--devroot", str(npu.devroot), "--cache-dir", str(tmp_path / "c")]) == 0
    r = _json(capsys)
    assert r["latency"]["count"] >= 20 and 0 < r["latency"]["p50_ms"] <= r["latency"]["p99_ms"]
    assert r["latency"]["device_time_p50_ms"] > 0
    assert r["throughput"]["requests"] == 2 and r["throughput"]["fps"] > 0
    assert r["macs"] == 12_501_632
    chip = r["chip"]                    # the cores' busy time over the latency loop (GET_STATS)
    assert chip["jobs"] == r["latency"]["count"] and chip["tasks_per_job"] == 15
    assert chip["busy_per_job_us"] > 0 and chip["busy_per_task_us"] > 0 and chip["busy_per_mac_ps"] > 0
    stages = r["latency_stages"]        # where an inference's wall time went
    assert list(stages) == ["inputs", "job", "chip", "transport", "outputs"]
    assert all(v["p50_us"] >= 0 and v["mean_us"] >= 0 for name, v in stages.items() if name != "transport")
    assert r["path"] == "queue" and stages["chip"]["mean_us"] > 0     # user-queue jobs report the core's time
    # The job's mean is the chip's plus the transport's; the stages' means add up to the mean latency.
    assert abs(stages["job"]["mean_us"] - stages["chip"]["mean_us"] - stages["transport"]["mean_us"]) < 1
    summed = sum(stages[name]["mean_us"] for name in ("inputs", "job", "outputs"))
    assert summed <= r["latency"]["mean_ms"] * 1e3 + 1
    assert r["cpu_per_inference_us"]["npu"] > 0
    if "litert_skipped" not in r:
        assert set(r["litert"]) == {"builtin_ref", "xnnpack"}
        assert r["ratios"]["npu_p50_over_litert_builtin_ref_p50"] > 0
        assert set(r["cpu_per_inference_us"]) == {"npu", "builtin_ref", "xnnpack"}


def test_bench_model_takes_benchmark_apps_options(npu, resnet8_path, tmp_path, capsys):
    """-niter, -i, -hint and -pc, as OpenVINO's benchmark_app has them."""
    x = np.random.default_rng(3).integers(-128, 128, (1, 32, 32, 3)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    assert main(["bench", "model", str(resnet8_path), "-niter", "30", "-i", str(tmp_path / "x.npy"),
                 "-hint", "latency", "-pc", "--no-litert", "--json", "--devroot", str(npu.devroot),
                 "--cache-dir", str(tmp_path / "c")]) == 0
    r = _json(capsys)
    assert r["latency"]["count"] == 30 and r["throughput"]["inferences"] == 30
    assert r["hint"] == "latency" and r["throughput"]["requests"] == 1      # LATENCY's optimal number
    assert r["latency"]["max_ms"] >= r["latency"]["p99_ms"]
    assert len(r["profile"]["layers"]) == 15 and "model us" in r["profile_table"]
    assert main(["bench", "model", str(resnet8_path), "-niter", "0"]) == 2
    assert "--iterations must be at least 1" in capsys.readouterr().err


def test_bench_model_reference_in_a_loop_of_its_own(npu, resnet8_path, tmp_path, capsys):
    pytest.importorskip("ai_edge_litert.interpreter")
    assert main(["bench", "model", str(resnet8_path), "--seconds", "0.2", "--requests", "1", "--json",
                 "--reference-loop", "separate", "--devroot", str(npu.devroot),
                 "--cache-dir", str(tmp_path / "c")]) == 0
    r = _json(capsys)
    assert r["reference_loop"] == "separate" and set(r["litert"]) == {"builtin_ref", "xnnpack"}
    assert r["litert"]["builtin_ref"]["count"] >= 20 and r["latency"]["count"] >= 20
    # Each ratio divides p50s of one loop: XNNPACK's by the device's latency p50 (the same loop).
    xnnpack = r["ratios"]["npu_p50_over_litert_xnnpack_p50"]
    assert xnnpack == pytest.approx(r["latency"]["p50_ms"] / r["litert"]["xnnpack"]["p50_ms"], rel=1e-2)
    assert r["ratios"]["npu_p50_over_litert_builtin_ref_p50"] > 0
    assert main(["bench", "model", str(resnet8_path), "--reference-loop", "apart"]) == 2


def test_bench_nop_json(npu, capsys):
    assert main(["bench", "nop", "-n", "40", "--json", "--devroot", str(npu.devroot)]) == 0
    r = _json(capsys)
    assert {"nop_p50_us", "nop_p99_us", "nop_submit_wait_p50_us", "rtt_p50_us", "ratio",
            "ratio_submit_wait"} <= set(r)                       # the keys scripts rely on
    assert r["jobs_per_s_one_by_one"] > 0 and r["jobs_per_s_batched_8"] > 0


@pytest.mark.parametrize("path", ["queue", "ioctl"])
def test_bench_nop_json_on_either_path(npu, capsys, path):
    assert main(["bench", "nop", "-n", "40", "--json", "--path", path, "--devroot", str(npu.devroot)]) == 0
    r = _json(capsys)
    assert r["path"] == path and r["nop_p50_us"] > 0 and r["jobs_per_s_batched_8"] > 0


def test_bench_nop_processes_json(npu, capsys):
    assert main(["bench", "nop", "-n", "5", "--processes", "2", "--seconds", "0.3", "--json",
                 "--devroot", str(npu.devroot)]) == 0
    r = _json(capsys)
    assert r["processes"] == 2 and len(r["completed"]) == 2 and r["errors"] == 0
    assert all(c > 0 for c in r["completed"]) and 0 < r["jain_fairness"] <= 1


def test_a_memory_plan_larger_than_its_tensors_says_padding_not_a_negative_saving():
    from libnpu.tools.compile import format_plan
    plan = {"regions": [], "total_bytes": 1, "activation_tensors_bytes": 100, "activation_arena_bytes": 712,
            "activation_reuse_saving": -6.12, "tasks": 1, "macs": 2}
    text = format_plan(plan)
    assert "612 bytes of alignment padding" in text and "-" not in text.split("arena")[1]


def test_compile_tiles_plans_one_inference_for_several_cores(tmp_path, capsys, resnet8_path):
    """`npu compile --tiles 2` writes what libnpu.load's NPU_TILES compiles: large layers in
    row bands, their dependencies in the tasks (the chip runs them side by side)."""
    one, two = tmp_path / "one.nlb", tmp_path / "two.nlb"
    for out, extra in ((one, []), (two, ["--tiles", "2"])):
        assert main(["compile", str(resnet8_path), "-o", str(out), "--cache-dir", str(tmp_path / "c"), "--json",
                     *extra]) == 0
        capsys.readouterr()
    assert len(Loadable.load(two).tasks) > len(Loadable.load(one).tasks)
    assert main(["compile", str(resnet8_path), "-o", str(tmp_path / "bad.nlb"), "--tiles", "0"]) == 2
    assert "--tiles must be >= 1" in capsys.readouterr().err
