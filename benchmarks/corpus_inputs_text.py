"""Inputs of round 5's sequence models (name transliteration), prepared as their package prepares them.

arabic-name-romanizer 0.2.0 (``inference.OnnxModel`` and ``beam_search``; versions of
benchmarks/corpus_manifest.py ``ROUND5``): a name unit becomes its vocabulary's ids (the
``vocab.json`` beside the model) of a country token, a role token, its characters and EOS;
a batch is padded with PAD (0) to its longest unit and ``src_mask`` marks the padding
(``pad_batch``). The encoder takes ``src`` and ``src_mask``; the decoder's first beam step
takes the encoder's outputs repeated ``beam_width`` times (``meta.json``) and a prefix of
BOS. The names are the units of the lookup table the wheel ships (``names.sqlite3``): its
Persian-script countries (AF, IR, PK) for the Persian model, the others for the Arabic
one (``persian.script_of``), calibration and evaluation from different units. Each batch
holds 8 units, one of them exactly ``ANR_WIDTH`` ids long (so the package's padding gives
that width: one input shape).
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from benchmarks.corpus_inputs import Feed, Feeds, Runner, _sibling
from benchmarks.corpus_manifest import CorpusModel, fetch_file

ANR_BATCH, ANR_WIDTH = 8, 12
ANR_BATCHES = {"cal": 16, "eval": 8}
PERSIAN_COUNTRIES = ("AF", "IR", "PK")
PAD, BOS, EOS, UNK = 0, 1, 2, 3


def anr_ids(index: dict[str, int], unit: str, country: str, role: str) -> list[int]:
    """``encode_source_ids``: country and role tokens, the characters, EOS (unknown: UNK)."""
    tokens = [f"<{country.upper()}>" if country else "<UNK_COUNTRY>", f"<ROLE_{(role or 'unknown').upper()}>"]
    return [index.get(t, UNK) for t in tokens] + [index.get(ch, UNK) for ch in unit] + [EOS]


def anr_batches(units: list[list[int]], count: int) -> list[np.ndarray]:
    """``count`` batches of ANR_BATCH units padded with PAD to ANR_WIDTH, each holding one
    unit of exactly that width (the rest shorter), in order."""
    full = [u for u in units if len(u) == ANR_WIDTH]
    short = [u for u in units if len(u) < ANR_WIDTH]
    out = []
    for b in range(min(count, len(full), len(short) // (ANR_BATCH - 1))):
        batch = [full[b]] + short[b * (ANR_BATCH - 1):(b + 1) * (ANR_BATCH - 1)]
        ids = np.full((ANR_BATCH, ANR_WIDTH), PAD, np.int64)
        for row, unit in enumerate(batch):
            ids[row, :len(unit)] = unit
        out.append(ids)
    return out


@cache
def _units(requirement: str, folder: str) -> dict[str, list[list[int]]]:
    """The wheel's name units as ids of the vocabulary in ``folder``, split between
    calibration (even rows) and evaluation (odd rows) of a fixed order."""
    index = {t: i for i, t in enumerate(json.loads(fetch_file(requirement, f"{folder}/vocab.json").read_text(
        encoding="utf-8"))["tokens"])}
    persian = folder.endswith("/persian")
    db = sqlite3.connect(fetch_file(requirement, "arabic_name_romanizer/resources/names.sqlite3"))
    try:
        rows = db.execute("SELECT DISTINCT arabic_key, country, role FROM units ORDER BY arabic_key, country, role"
                          ).fetchall()
    finally:
        db.close()
    mine = [anr_ids(index, u, c, r) for u, c, r in rows if (c in PERSIAN_COUNTRIES) == persian]
    return {"cal": mine[0::2], "eval": mine[1::2]}


def _encoder_feeds(model: CorpusModel, which: str) -> list[Feed]:
    folder = model.path.rsplit("/", 1)[0]
    return [{"src": ids, "src_mask": ids == PAD}
            for ids in anr_batches(_units(model.requirement, folder)[which], ANR_BATCHES[which])]


def anr_encoder(model: CorpusModel, path: Path) -> Feeds:
    cal, evaluation = (_encoder_feeds(model, w) for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {"src": (ANR_BATCH, ANR_WIDTH), "src_mask": (ANR_BATCH, ANR_WIDTH)})


def anr_decoder(model: CorpusModel, path: Path) -> Feeds:
    folder = model.path.rsplit("/", 1)[0]
    beams = int(json.loads(fetch_file(model.requirement, f"{folder}/meta.json").read_text())["beam_width"])
    encoder = Runner(_sibling(model, "encoder"))

    def first_step(feed: Feed) -> Feed:
        memory, mask, hidden = encoder(feed).values()   # meta.json's state_names, in order
        expand = np.repeat(np.arange(ANR_BATCH), beams)
        return {"prefix": np.full((ANR_BATCH * beams, 1), BOS, np.int64), "memory": memory[expand],
                "src_mask": mask[expand], "hidden": hidden[expand]}

    rows = ANR_BATCH * beams
    cal, evaluation = ([first_step(f) for f in _encoder_feeds(model, w)] for w in ("cal", "eval"))
    return Feeds(cal, evaluation, {"prefix": (rows, 1), "memory": (rows, ANR_WIDTH, 256),
                                   "src_mask": (rows, ANR_WIDTH), "hidden": (rows, 2, 256)})


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {f.__name__: f for f in (anr_encoder, anr_decoder)}
