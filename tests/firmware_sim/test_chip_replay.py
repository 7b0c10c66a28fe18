"""benchmarks/chip_replay: a model's job replayed in-process by the chip's executor gives
the first run's outputs, and the benchmark reports a chip time per job."""
from benchmarks.chip_replay import main, replay
from libnpu.compiler.cache import CompileCache


def test_kws_replays_to_the_first_runs_outputs(kws_path, tmp_path, capsys) -> None:
    r = replay(str(kws_path), jobs=3, rounds=2, cache=CompileCache(tmp_path))
    assert r["tasks"] == 14 and r["cpu_us"] > 0
    assert main([str(kws_path), "--jobs", "2", "--rounds", "1", "--cache-dir", str(tmp_path)]) == 0
    assert "chip CPU" in capsys.readouterr().out
