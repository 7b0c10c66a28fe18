"""Every corpus model's feeds by key: the one lookup from a manifest entry to its inputs.

``prepare(model, path)`` returns the ``Feeds`` (benchmarks/corpus_inputs.py) of ``model``:
the preparations of rounds 2-3 live in ``corpus_inputs``, the picture models of rounds 4-5
in ``corpus_inputs_vision``, their audio models in ``corpus_inputs_audio`` and round 5's
name transliteration models in ``corpus_inputs_text``; round 6's by family in the same three
modules (its face mesh through ``corpus_inputs.face_landmark``); round 8's landmark models
in ``corpus_inputs_landmarks``, its text models in ``corpus_inputs_text``, its EEG model in
``corpus_inputs_eeg``; round 9's in ``corpus_inputs_round9``; a manifest entry's ``feed`` is a key of ``FEEDS``.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks import (
    corpus_inputs,
    corpus_inputs_audio,
    corpus_inputs_eeg,
    corpus_inputs_landmarks,
    corpus_inputs_round9,
    corpus_inputs_text,
    corpus_inputs_vision,
)
from benchmarks.corpus_inputs import Feeds
from benchmarks.corpus_manifest import CorpusModel

FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    **corpus_inputs.FEEDS, **corpus_inputs_vision.FEEDS, **corpus_inputs_audio.FEEDS, **corpus_inputs_text.FEEDS,
    **corpus_inputs_landmarks.FEEDS, **corpus_inputs_eeg.FEEDS, **corpus_inputs_round9.FEEDS}


def prepare(model: CorpusModel, path: Path) -> Feeds:
    """The calibration and evaluation feeds of ``model`` (file ``path``)."""
    return FEEDS[model.feed](model, path)
