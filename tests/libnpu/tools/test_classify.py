"""The main job's classifier: ResNet-8 (CIFAR-10) on the device, on locally made inputs."""
from __future__ import annotations

import json

import numpy as np

from libnpu.tools import classify


def test_sample_inputs_are_model_inputs(astronaut):
    samples = classify.sample_inputs()
    assert len(samples) == 5 and len({name for name, _ in samples}) == 5
    for _, x in samples:
        assert x.shape == (1, 32, 32, 3) and x.dtype == np.int8
    white = classify.to_input(np.full((64, 64, 3), 255, np.uint8))
    assert np.all(white == 127)                         # pixel - 128


def test_classify_program_matches_litert(npu, resnet8_path, litert_ok, tmp_path, capsys):
    assert classify.run_classify(devroot=npu.devroot, cache_dir=tmp_path, as_json=True) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["results"]) == 5
    for row in report["results"]:
        assert row["identical_to_litert_builtin_ref"] is True
        assert row["top1"] in classify.CIFAR10_CLASSES and 0.1 < row["probability"] <= 1.0
        assert row["latency_ms"] > 0 and row["device_time_ms"] > 0
