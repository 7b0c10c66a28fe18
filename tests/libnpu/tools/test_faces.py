"""The main job's face detector: BlazeFace quantized by our quantizer, run on the device.

The expected face region of each picture comes from the float model run by LiteRT
(decoded with the same anchors and NMS), not from hand-written coordinates.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from libnpu import model_zoo
from libnpu.tools import faces
from libnpu.tools.vision import iou


@pytest.fixture(scope="module")
def detector(npu, blazeface_path, astronaut, tmp_path_factory):
    cache = tmp_path_factory.mktemp("compile-cache")
    found, timing = faces.load_detector(devroot=npu.devroot, cache_dir=cache)
    yield found, timing, cache
    found.close()


@pytest.mark.parametrize("picture", ["astronaut", "second"])
def test_quantized_detector_finds_the_face(detector, astronaut, litert_ok, picture):
    image = astronaut if picture == "astronaut" else faces.second_picture()
    expected = faces.reference_detections(image)          # float BlazeFace in LiteRT
    assert len(expected) == 1 and expected[0].score > 0.9
    found = detector[0].detect(image)
    assert len(found) == 1
    face, ref = found[0], expected[0]
    assert face.score > 0.8
    assert iou(face.box, ref.box) > 0.85
    width = ref.box[2] - ref.box[0]
    # eyes, nose, mouth, ears: each within 12 % of the face width of the float model's
    assert np.linalg.norm(face.keypoints - ref.keypoints, axis=1).max() < 0.12 * width
    assert 0.1 < width / image.shape[1] < 0.5
    assert detector[0].last_timing["latency_ms"] > 0 and detector[0].last_timing["device_time_ms"] > 0


def test_no_face_in_a_plain_picture(detector, litert_ok):
    ys, xs = np.mgrid[0:200, 0:300]
    plain = np.stack([xs * 255 // 300, ys * 255 // 200, 128 + 0 * xs], -1).astype(np.uint8)
    assert faces.reference_detections(plain) == []
    assert detector[0].detect(plain) == []


def test_second_load_hits_the_compile_cache(detector, npu):
    _, first, cache = detector
    assert first.cache_hit is False
    again, timing = faces.load_detector(devroot=npu.devroot, cache_dir=cache)
    again.close()
    assert timing.cache_hit is True and timing.compile_s < first.compile_s


def test_faces_program_writes_annotated_pngs(detector, npu, tmp_path, capsys):
    assert faces.run_faces([], out_dir=tmp_path, devroot=npu.devroot, cache_dir=detector[2], as_json=True) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["load"]["cache_hit"] is True
    assert [p["picture"] for p in report["pictures"]] == ["astronaut", "astronaut_mirrored_zoomed"]
    for entry in report["pictures"]:
        assert len(entry["faces"]) == 1 and entry["latency_ms"] > 0
        pixels = model_zoo.load_png(entry["png"])
        assert list(pixels.shape[:2]) == entry["size"]
        x0, y0, x1, y1 = (int(round(v)) for v in entry["faces"][0]["box"])
        assert tuple(pixels[y0, (x0 + x1) // 2]) == (255, 0, 0)     # the box's top edge is drawn
        assert tuple(pixels[(y0 + y1) // 2, x0]) == (255, 0, 0)     # and its left edge


def test_bad_picture_is_a_clear_error(npu, tmp_path):
    from libnpu.tools.models import ModelSpecError
    bad = tmp_path / "x.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(ModelSpecError, match="cannot read the picture"):
        faces.run_faces([bad], out_dir=tmp_path, devroot=npu.devroot)
    with pytest.raises(ValueError, match="RGB"):
        faces.preprocess(np.zeros((10, 10), np.uint8))
