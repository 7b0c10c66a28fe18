"""The C int16 kernels' vector paths against the numpy kernels, byte for byte, on the shapes
float models compiled with default options give them (whole pixels of 1-40 channels, images
larger than a tile): int16 ADD / MUL / PRELU over pixels (per-channel or one requantization,
operands broadcast along the pixels or the channels, left shifts, the INT32_MIN multiplier
the lanes leave to the scalar loop), int16 x int8 depthwise (windows inside the image in
pairs, windows across the border) and convolution (tiles of pixels, a 1x1 window read where
it lies, runs copied in one piece, the k > 256 and grouped paths); and the chip's int16 PRELU
units replayed as C calls (they ran in numpy on every inference); and every C file with lanes
compiled with them."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from firmware_sim import job_plans
from firmware_sim.executor import run_job
from firmware_sim.kernels import binary, int16x8, native
from firmware_sim.kernels.native import int16_calls
from firmware_sim.timing import HardwareProfile
from libnpu.compiler.ops.binary import prelu_params
from npu_hw import iommu, ops
from npu_hw.ops import PADDING_SAME, PADDING_VALID, conv_geometry
from tests.support.chip_memory import ASID, ChipMemory, encode, ranked
from tests.support.quant_utils import random_int8, random_int16

pytestmark = pytest.mark.skipif(native.library() is None, reason="no C kernels")

CLAMPS = ((-32768, 32767), (-2000, 3000))


def _pixels(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """An NHWC output shape, the second operand's shape (the same, the channels alone, the
    pixels alone or one value) and the channel count."""
    c = int(rng.choice([1, 3, 8, 16, 24, 33, 40]))
    shape = (1, int(rng.integers(1, 7)), int(rng.integers(1, 7)), c)
    other = [shape, (1, 1, 1, c), shape[:3] + (1,), (1,)][int(rng.integers(0, 4))]
    return shape, other, c


def _macros(cc: str, source, *flags: str) -> str:
    """The macros defined at the end of ``source`` compiled with ``flags``."""
    return subprocess.run([cc, "-E", "-dM", "-std=c11", *flags, str(source)], capture_output=True, text=True,
                          check=True).stdout


def test_every_c_file_with_int16_lanes_is_compiled_with_them() -> None:
    # binary16_kernels.c tests INT16_LANES, which int16_kernels.c alone defined: split from it,
    # its ADD / MUL / PRELU ran the scalar loop (EfficientNet swish MULs 7x slower).
    cc = native._compiler()
    assert cc is not None
    if "#define __AVX512BW__" not in _macros(cc, "/dev/null", "-x", "c", "-march=native"):
        pytest.skip("no AVX-512 in the C compiler's -march=native")
    users = [s for s in native.SOURCES if "INT16_LANES" in s.read_text()]
    assert len(users) >= 2
    for source in users:
        assert "#define INT16_LANES 1" in _macros(cc, source, "-march=native"), source.name


def _binary_case(rng: np.random.Generator, kind: str, rows: int) -> tuple[np.ndarray, dict, dict]:
    """Parameters (one row per channel, or one) of ``kind``, the numpy kernel's arguments
    and the C call's."""
    clamp = dict(zip(("act_min", "act_max"), CLAMPS[int(rng.integers(0, 2))]))
    if kind == "add":
        m, s = rng.integers(0, 1 << 31, size=(rows, 3)), rng.integers(-31, 1, size=(rows, 3))
        params = np.stack([m[:, 0], s[:, 0], m[:, 1], s[:, 1], m[:, 2], s[:, 2]], 1).astype(np.int32)
        left = int(rng.integers(0, 17))
        return params, dict(left_shift=left, params=params, **clamp), dict(left_shift=left, **clamp)
    m, s = rng.integers(-(1 << 31), 1 << 31, size=(rows, 2)), rng.integers(-31, 31, size=(rows, 2))
    m[0, 0] = -(1 << 31)            # with a left shift the lanes leave the call to the scalar loop
    if rng.random() < 0.5:          # right shifts only: the lanes
        m[0, 0], s = int(rng.integers(0, 1 << 31)), -np.abs(s)
    if kind == "mul":
        params = np.stack([m[:, 0], s[:, 0]], 1).astype(np.int32)
        return params, dict(multiplier=params[:, 0], shift=params[:, 1], **clamp), dict(clamp)
    params = np.stack([m[:, 0], s[:, 0], m[:, 1], s[:, 1]], 1).astype(np.int32)
    return params, dict(params=params), dict(act_min=-32768, act_max=32767)


def _binary_numpy(kind: str, a: np.ndarray, b: np.ndarray, args: dict) -> np.ndarray:
    if kind == "add":
        return int16x8.add_int16_per_channel(a, b, **args)
    if kind == "mul":
        raw = int16x8.multiply_by_quantized_multiplier(a.astype(np.int64) * b.astype(np.int64),
                                                       args["multiplier"].astype(np.int64),
                                                       args["shift"].astype(np.int64))
        return int16x8.store_int16(raw, 0, args["act_min"], args["act_max"])
    return binary.prelu_int16_per_channel(a, b, **args)


@pytest.mark.parametrize("kind", ["add", "mul", "prelu"])
def test_int16_binary_lanes_over_pixels_compute_what_numpy_computes(kind: str) -> None:
    rng = np.random.default_rng(90 + len(kind))
    for case in range(60):
        shape, other, c = _pixels(rng)
        rows = c if case % 3 else 1
        a = random_int16(rng, shape)
        b = random_int16(rng, other)
        a.reshape(-1)[:2] = [-32768, 32767][: a.size]
        b.reshape(-1)[:1] = -32768
        params, args, call_args = _binary_case(rng, kind, rows)
        if rows == 1 and kind != "mul":
            params = np.repeat(params, c, axis=0)      # the numpy kernels take one row per channel
            args["params"] = params
        out = np.empty(shape, np.int16)
        rerun = int16_calls.bind_binary16(kind, a, b, out, params[:rows].copy() if rows == 1 else params,
                                          **call_args)
        assert rerun is not None
        rerun()
        np.testing.assert_array_equal(out, _binary_numpy(kind, a, b, args), err_msg=f"{kind} {shape} {other}")


def _conv_case(rng: np.random.Generator, depthwise: bool) -> tuple | None:
    h, w = int(rng.integers(1, 14)), int(rng.integers(1, 14))
    cin = int(rng.choice([1, 3, 8, 16, 24, 33]))
    kh = kw = int(rng.choice([1, 1, 3, 5]))
    stride = (int(rng.choice([1, 1, 2])),) * 2
    dilation = (int(rng.choice([1, 1, 1, 2])),) * 2
    mode = PADDING_SAME if rng.random() < 0.7 else PADDING_VALID
    oh, pt = conv_geometry(h, kh, stride[0], dilation[0], mode)
    ow, pl = conv_geometry(w, kw, stride[1], dilation[1], mode)
    if oh < 1 or ow < 1:
        return None
    if depthwise:
        cout, groups = cin, 1
        wt = random_int8(rng, (1, kh, kw, cout))
    else:
        groups = 2 if cin % 2 == 0 and rng.random() < 0.15 else 1
        cout = groups * int(rng.choice([1, 8, 16, 20]))
        if rng.random() < 0.1:                      # k > 256: the int64 path
            cin, kh, kw = 40, 3, 3
            oh, pt = conv_geometry(h, kh, stride[0], dilation[0], mode)
            ow, pl = conv_geometry(w, kw, stride[1], dilation[1], mode)
            if oh < 1 or ow < 1:
                return None
        wt = random_int8(rng, (cout, kh, kw, cin // groups))
    x = random_int16(rng, (1, h, w, cin))
    x.reshape(-1)[:2] = [-32768, 32767][: x.size]
    wt.reshape(-1)[:1] = -128
    bias = None if rng.random() < 0.2 else rng.integers(-(1 << 40), 1 << 40, size=cout, dtype=np.int64)
    size = cout if rng.random() < 0.7 else 1
    mult = rng.integers(0, 1 << 31, size=size, dtype=np.int64).astype(np.int32)
    shift = rng.integers(-31, 15, size=size).astype(np.int32)
    clamp = CLAMPS[int(rng.integers(0, 2))]
    kwargs = dict(stride=stride, dilation=dilation, padding=(pt, pl), out_hw=(oh, ow), multiplier=mult, shift=shift,
                  act_min=clamp[0], act_max=clamp[1])
    return x, wt, bias, kwargs


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_int16x8_convolution_lanes_compute_what_numpy_computes(depthwise: bool) -> None:
    rng = np.random.default_rng(70 + depthwise)
    fn = int16x8.depthwise_conv2d_16x8 if depthwise else int16x8.conv2d_16x8
    done = 0
    while done < 30:
        case = _conv_case(rng, depthwise)
        if case is None:
            continue
        x, wt, bias, kwargs = case
        want = fn(x, wt, bias, **kwargs)
        out = np.empty_like(want)
        rerun = int16_calls.bind_conv16(x, wt, bias, depthwise=depthwise, out=out, **kwargs)
        assert rerun is not None
        rerun()
        np.testing.assert_array_equal(out, want, err_msg=f"{x.shape} {wt.shape} {kwargs['stride']}")
        done += 1


def test_int16_prelu_units_replay_as_c_calls(mem: ChipMemory) -> None:
    """PRELU16_PER_CHANNEL and the per-tensor int16 PRELU: the job's replay is one C call,
    and it computes the numpy kernels' bytes on the inputs' new contents."""
    rng = np.random.default_rng(33)
    x, alpha = random_int16(rng, (1, 6, 5, 16)), random_int16(rng, (1, 1, 1, 16))
    rows = np.array([[prelu_params(float(s), 3e-3, 2e-4)[k] for k in ops.PRELU16_CHANNEL_PARAMS]
                     for s in rng.uniform(1e-4, 4e-4, 16)], np.int32)
    tensor = prelu_params(2e-4, 3e-3, 1e-4)
    x_at, out1, out2 = mem.put(x), mem.alloc(x.nbytes), mem.alloc(x.nbytes)
    shapes = dict(rank=4, in1_shape=ranked(x.shape), in2_shape=ranked(alpha.shape), out_shape=ranked(x.shape),
                  input1=x_at, input2=mem.put(alpha), input1_zp=0, input2_zp=0, output_zp=0)
    command = (encode("PRELU16_PER_CHANNEL", ops.OPF_INT16, **shapes, output=out1, params=mem.put(rows), channels=16)
               + encode("PRELU", ops.OPF_INT16, **shapes, output=out2, **tensor))
    at = mem.put(np.frombuffer(command, np.uint8))
    for _ in range(job_plans.NATIVE_TRIES + 1):
        assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    plan = job_plans.lookup(mem.dma, ASID, at, np.frombuffer(command, np.uint8))
    assert plan is not None and plan.native is not None, "both PRELU tasks are C kernel calls"
    x = random_int16(rng, x.shape)
    mem.bytes[x_at - iommu.IOVA_BASE:x_at - iommu.IOVA_BASE + x.nbytes] = x.reshape(-1).view(np.uint8)
    assert run_job(mem.dma, ASID, at, len(command), HardwareProfile()).status == 0
    np.testing.assert_array_equal(mem.get(out1, np.int16, x.shape),
                                  binary.prelu_int16_per_channel(x, alpha, params=rows))
    np.testing.assert_array_equal(mem.get(out2, np.int16, x.shape),
                                  binary.prelu(x, alpha, input1_zp=0, input2_zp=0, output_zp=0, **tensor))


def test_int16_gather_reruns_in_c_as_numpy_computes() -> None:
    """int16 GATHER (silero's and basic-pitch's default compiles) reruns in C on new rows and
    new indices; an index rewritten out of range fails the rerun as numpy refuses it."""
    from firmware_sim.errors import InvalidCommand
    from firmware_sim.kernels import layout
    from firmware_sim.kernels.native import data_calls
    rng = np.random.default_rng(34)
    for _ in range(10):
        outer, axis, inner, count = (int(v) for v in rng.integers(1, 9, size=4))
        x = random_int16(rng, (outer, axis, inner))
        indices = rng.integers(0, axis, size=count).astype(np.int32)
        out = np.empty((outer, count, inner), np.int16)
        layout.gather(x, indices, out=out)
        rerun = data_calls.bind_gather(x, indices, out)
        assert rerun is not None
        x[...] = random_int16(rng, x.shape)
        indices[...] = rng.integers(0, axis, size=count)
        rerun()
        np.testing.assert_array_equal(out, layout.gather(x, indices))
    indices[0] = axis
    with pytest.raises(InvalidCommand):
        rerun()
