"""``npu compile --equalize``: channel equalization from the command line."""
from __future__ import annotations

import numpy as np
import onnx

from libnpu.loadable import Loadable
from libnpu.tools.cli import main
from tests.libnpu.compiler.test_equalization import SHAPE, starved_channel


def test_equalize_is_reported_and_a_recipe_can_be_turned_off(tmp_path, capsys) -> None:
    model = tmp_path / "starved.onnx"
    onnx.save(starved_channel(), model)
    np.save(tmp_path / "cal.npy", np.random.default_rng(4).uniform(0, 1, (4, *SHAPE)).astype(np.float32))
    common = ["--calibration", str(tmp_path / "cal.npy"), "--cache-dir", str(tmp_path / "c"), "--report"]
    out = tmp_path / "eq.nlb"
    assert main(["compile", str(model), "-o", str(out), "--equalize", *common]) == 0
    assert "1 channel equalized" in capsys.readouterr().out
    assert Loadable.load(out).metadata["calibration"]["equalized_channels"] == 1
    assert main(["compile", str(model), "-o", str(out), "--no-equalize", *common]) == 0
    assert "equalized" not in capsys.readouterr().out
    assert "equalized_channels" not in Loadable.load(out).metadata["calibration"]
