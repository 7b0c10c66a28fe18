"""SSD anchors, box decoding, NMS and picture helpers (no device needed)."""
from __future__ import annotations

import numpy as np
import pytest

from libnpu import model_zoo
from libnpu.tools.vision import (
    BLAZEFACE_DECODE,
    BLAZEFACE_SHORT_RANGE,
    AnchorOptions,
    Detection,
    decode_ssd,
    draw_box,
    iou,
    letterbox,
    nms,
    resize,
    ssd_anchors,
    weighted_nms,
    write_png,
)


def test_blazeface_anchor_layout():
    a = ssd_anchors(BLAZEFACE_SHORT_RANGE)
    assert a.shape == (896, 4) and a.dtype == np.float32
    assert np.all(a[:, 2:] == 1.0)                      # fixed anchor size
    # stride 8: a 16x16 grid, 2 anchors per cell, row-major
    fine = a[:512].reshape(16, 16, 2, 4)
    assert np.all(fine[:, :, 0] == fine[:, :, 1])
    np.testing.assert_allclose(fine[0, :, 0, 0], (np.arange(16) + 0.5) / 16)
    np.testing.assert_allclose(fine[:, 0, 0, 1], (np.arange(16) + 0.5) / 16)
    # the three stride-16 layers share one 8x8 grid: 6 anchors per cell
    coarse = a[512:].reshape(8, 8, 6, 4)
    assert np.all(coarse == coarse[:, :, :1])
    np.testing.assert_allclose(coarse[3, 5, 0, :2], [5.5 / 8, 3.5 / 8])


def test_anchor_sizes_without_fixed_size():
    opts = AnchorOptions(input_height=64, input_width=64, strides=(32, 64), min_scale=0.2, max_scale=0.8,
                         aspect_ratios=(1.0, 4.0), fixed_anchor_size=False)
    a = ssd_anchors(opts)
    assert a.shape == (2 * 2 * 3 + 1 * 1 * 3, 4)
    first = a[:3]
    np.testing.assert_allclose(first[0, 2:], [0.2, 0.2])             # scale 0.2, ratio 1
    np.testing.assert_allclose(first[1, 2:], [0.4, 0.1])             # ratio 4: w = s*2, h = s/2
    np.testing.assert_allclose(first[2, 2:], [np.sqrt(0.2 * 0.8)] * 2, rtol=1e-6)  # interpolated with next layer
    np.testing.assert_allclose(a[-1, 2:], [np.sqrt(0.8)] * 2, rtol=1e-6)  # the last layer interpolates with 1.0
    with pytest.raises(ValueError):
        ssd_anchors(AnchorOptions(input_height=8, input_width=8, strides=()))


def _raw(anchors, index, box_px, score_logit, keypoints_px=()):
    boxes = np.zeros((1, len(anchors), 16), np.float32)
    scores = np.full((1, len(anchors), 1), -20.0, np.float32)
    ax, ay = anchors[index, :2] * 128
    cx, cy, w, h = box_px
    boxes[0, index, :4] = [cx - ax, cy - ay, w, h]
    for k, (kx, ky) in enumerate(keypoints_px):
        boxes[0, index, 4 + 2 * k:6 + 2 * k] = [kx - ax, ky - ay]
    scores[0, index, 0] = score_logit
    return boxes, scores


def test_decode_box_keypoints_and_threshold():
    a = ssd_anchors()
    boxes, scores = _raw(a, 700, (64, 40, 32, 16), 2.0, [(60, 38), (70, 41)])
    found = decode_ssd(boxes, scores, a)
    assert len(found) == 1
    d = found[0]
    assert d.score == pytest.approx(1 / (1 + np.exp(-2.0)))
    np.testing.assert_allclose(d.box * 128, [48, 32, 80, 48], atol=1e-4)
    np.testing.assert_allclose(d.keypoints[:2] * 128, [[60, 38], [70, 41]], atol=1e-4)
    assert d.keypoints.shape == (6, 2)
    # under the threshold (sigmoid(-1) < 0.5): nothing
    _, low = _raw(a, 700, (64, 40, 32, 16), -1.0)
    assert decode_ssd(boxes, low, a) == []
    # logits are clipped before the sigmoid, so huge values stay finite
    _, huge = _raw(a, 700, (64, 40, 32, 16), 1e6)
    assert decode_ssd(boxes, huge, a)[0].score == pytest.approx(1.0)
    with pytest.raises(ValueError, match="anchors"):
        decode_ssd(boxes[:, :10], scores, a)
    with pytest.raises(ValueError, match="one per anchor"):
        decode_ssd(boxes, scores[:, :10], a)
    assert BLAZEFACE_DECODE.x_scale == 128 and BLAZEFACE_DECODE.min_score_thresh == 0.5


def test_iou():
    assert iou(np.array([0, 0, 2, 2]), np.array([1, 1, 3, 3])) == pytest.approx(1 / 7)
    assert iou(np.array([0, 0, 1, 1]), np.array([2, 2, 3, 3])) == 0.0
    assert iou(np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1])) == 1.0
    assert iou(np.zeros(4), np.zeros(4)) == 0.0


def _det(score, box):
    return Detection(score, np.array(box, float), np.array([[box[0], box[1]]], float))


def test_plain_and_weighted_nms():
    dets = [_det(0.6, [0.1, 0.1, 0.5, 0.5]), _det(0.9, [0.12, 0.1, 0.52, 0.5]), _det(0.8, [0.6, 0.6, 0.9, 0.9]),
            _det(0.3, [0.14, 0.1, 0.54, 0.5])]
    kept = nms(dets, 0.3)
    assert [d.score for d in kept] == [0.9, 0.8]
    np.testing.assert_allclose(kept[0].box, [0.12, 0.1, 0.52, 0.5])
    assert len(nms(dets, 0.3, max_detections=1)) == 1
    merged = weighted_nms(dets, 0.3)
    assert [d.score for d in merged] == [0.9, 0.8]
    x0 = (0.9 * 0.12 + 0.6 * 0.1 + 0.3 * 0.14) / 1.8          # score-weighted mean of the cluster
    np.testing.assert_allclose(merged[0].box, [x0, 0.1, x0 + 0.4, 0.5])
    np.testing.assert_allclose(merged[0].keypoints, [[x0, 0.1]])
    np.testing.assert_allclose(merged[1].box, [0.6, 0.6, 0.9, 0.9])
    assert nms([], 0.3) == [] and weighted_nms([], 0.3) == []


def test_letterbox_maps_back_to_source():
    img = np.zeros((100, 200, 3), np.uint8)
    img[40:60, 150:170] = 255                           # a white square
    fitted, box = letterbox(img, 128, 128)
    assert fitted.shape == (128, 128, 3)
    assert (box.scale, box.pad_x, box.pad_y) == (0.64, 0.0, 32.0)
    assert fitted[:30].max() == 0 and fitted[-30:].max() == 0          # padding above and below
    ys, xs = np.nonzero(fitted[..., 0] > 127)
    corners = box.to_source(np.array([[xs.min(), ys.min()], [xs.max() + 1, ys.max() + 1]]) / 128)
    np.testing.assert_allclose(corners, [[150, 40], [170, 60]], atol=2)


def test_resize_keeps_constant_and_mean():
    flat = np.full((64, 48, 3), 77, np.uint8)
    np.testing.assert_allclose(resize(flat, 16, 12), 77, atol=1e-3)
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (256, 256)).astype(np.float32)
    small = resize(noise, 32, 32)
    assert abs(small.mean() - noise.mean()) < 1.0 and small.std() < noise.std() / 4     # antialiased
    with pytest.raises(ValueError):
        resize(np.zeros((0, 3)), 4, 4)


def test_png_round_trip_and_drawing(tmp_path):
    img = np.zeros((40, 60, 3), np.uint8)
    img[..., 2] = np.arange(60, dtype=np.uint8)[None] * 4
    draw_box(img, (10, 5, 49.6, 30), (255, 0, 0), 2)
    assert tuple(img[5, 30]) == (255, 0, 0) and tuple(img[30, 30]) == (255, 0, 0)   # top and bottom edges
    assert tuple(img[20, 10]) == (255, 0, 0) and tuple(img[20, 50]) == (255, 0, 0)  # left and right edges
    assert tuple(img[20, 30]) == (0, 0, 120)                                       # inside untouched
    draw_box(img, (-50, -50, 500, 500), (0, 255, 0), 1)                             # clipped to the picture
    assert tuple(img[0, 0]) == (0, 255, 0) and tuple(img[39, 59]) == (0, 255, 0)
    path = write_png(tmp_path / "x.png", img)
    np.testing.assert_array_equal(model_zoo.load_png(path), img)
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4)
    np.testing.assert_array_equal(model_zoo.load_png(write_png(tmp_path / "g.png", grey))[..., 0], grey)
    with pytest.raises(ValueError, match="uint8"):
        write_png(tmp_path / "f.png", img.astype(np.float32))
    with pytest.raises(ValueError):
        write_png(tmp_path / "f.png", np.zeros((4, 4, 2), np.uint8))
