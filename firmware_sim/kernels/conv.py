"""int8 2-D convolution and depthwise convolution (NHWC), as TFLite's reference kernels.

``reference_integer_ops::ConvPerChannel`` / ``DepthwiseConvPerChannel``: points outside the
image are skipped, which equals padding with the input zero point; int32 accumulation;
per-channel fixed-point requantization (``MultiplyByQuantizedMultiplier``, double rounding).

Speed: output rows are processed in blocks that stay in cache. For each block the input
rows it reads are shifted by the zero point into float32 and zero-padded; conv gathers
them into im2col rows (a strided view of the block) for one float32 BLAS GEMM (K-chunked when
a partial sum could pass 2**24), depthwise splits the columns by stride phase and does
KH*KW contiguous multiply-adds. Then the block is requantized (see ``_Requant``) and
stored. Every sum is an integer within the float's exact range, so results are exact.

That numpy path is the readable reference. When the C kernels have oneDNN
(``native.has_dnnl()``), convolutions run in C instead: int8 im2col, oneDNN's int8 GEMM with
exact int32 sums, requantization in the store loop (``npu_conv_s8``), whenever no sum can
wrap int32; depthwise convolutions run in C whenever the C kernels are there.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from firmware_sim import caches
from npu_hw.ops import MAX_FILTER_EXTENT

from ..errors import InvalidCommand
from . import native, weight_cache
from .fixedpoint import F64Requant, multiply_by_quantized_multiplier, requantize_fixed_inplace
from .gemm import ROW_BLOCK_ELEMS, exact_gemm, gemm_chunk, int8_offset_bound, max_abs
from .native import calls as native_calls
from .output import accumulate_bias, check_int8_param, store_int8

__all__ = ["conv2d", "conv2d_bound", "depthwise_conv2d", "depthwise_conv2d_bound", "conv_groups"]


def _pair(name: str, v) -> tuple[int, int]:
    if len(v) != 2:
        raise InvalidCommand(f"{name} must be a pair (h, w), got {v!r}")
    return int(v[0]), int(v[1])


def _check_extent(axis: str, size: int, k: int, stride: int, dilation: int, pad: int,
                  out: int) -> None:
    """Padding on either side must be shorter than the dilated filter (as TFLite's SAME and
    VALID paddings are); anything else would make the chip pad without limit."""
    eff = (k - 1) * dilation + 1
    if eff > MAX_FILTER_EXTENT:
        raise InvalidCommand(f"dilated filter {axis} {eff} exceeds {MAX_FILTER_EXTENT}")
    after = (out - 1) * stride + eff - pad - size
    if out and (pad >= eff or after >= eff):
        raise InvalidCommand(f"{axis} padding ({pad} before, {after} after) must be smaller "
                         f"than the dilated filter ({eff})")


def _check_common(x: np.ndarray, w: np.ndarray, stride, dilation, padding, out_hw,
                  input_zp: int, output_zp: int, act_min: int, act_max: int) -> tuple:
    if x.dtype != np.int8 or w.dtype != np.int8:
        raise TypeError(f"input and filter must be int8, got {x.dtype} and {w.dtype}")
    if x.ndim != 4 or w.ndim != 4:
        raise InvalidCommand(f"input and filter must be 4-D, got {x.shape} and {w.shape}")
    sh, sw = _pair("stride", stride)
    dh, dw = _pair("dilation", dilation)
    pt, pl = _pair("padding", padding)
    oh, ow = _pair("out_hw", out_hw)
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, oh, ow) < 0:
        raise InvalidCommand("stride/dilation must be >= 1, padding/output size >= 0")
    _check_extent("height", x.shape[1], w.shape[1], sh, dh, pt, oh)
    _check_extent("width", x.shape[2], w.shape[2], sw, dw, pl, ow)
    check_int8_param("input_zp", input_zp)
    check_int8_param("output_zp", output_zp)
    check_int8_param("act_min", act_min)
    check_int8_param("act_max", act_max)
    if act_min > act_max:
        raise InvalidCommand(f"act_min {act_min} > act_max {act_max}")
    return sh, sw, dh, dw, pt, pl, oh, ow


def _check_quant(n_out: int, bias, multiplier, shift) -> tuple[np.ndarray, np.ndarray]:
    multiplier, shift = np.asarray(multiplier), np.asarray(shift)
    if multiplier.shape != shift.shape or multiplier.shape not in ((n_out,), (1,)):
        raise InvalidCommand(f"multiplier/shift must both be ({n_out},) or (1,), "
                         f"got {multiplier.shape} and {shift.shape}")
    if multiplier.dtype.kind not in "iu" or shift.dtype.kind not in "iu":
        raise TypeError(f"multiplier/shift must be integers, got {multiplier.dtype} and "
                        f"{shift.dtype}")
    if bias is not None and (bias.dtype != np.int32 or bias.shape != (n_out,)):
        raise InvalidCommand(f"bias must be int32 ({n_out},), got {bias.dtype} {bias.shape}")
    return multiplier, shift  # value ranges are checked once per plan (_Requant)


def _check_out(out: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous int8 buffer to compute into: ``out`` itself when it is one."""
    if out is None:
        return np.empty(shape, np.int8)
    if out.dtype != np.int8 or out.shape != shape:
        raise InvalidCommand(f"out must be int8 {shape}, got {out.dtype} {out.shape}")
    return out if out.flags.c_contiguous else np.empty(shape, np.int8)


def _deliver(result: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None or out is result:
        return result
    np.copyto(out, result)
    return out


class _Geometry:
    """Where each output row block reads the (zero-point-shifted, zero-padded) input."""

    def __init__(self, x: np.ndarray, input_zp: int, kh: int, kw: int, sh: int, sw: int,
                 dh: int, dw: int, pt: int, pl: int, ow: int):
        self.x, self.zp = x, np.float32(input_zp)
        self.kh, self.kw, self.sh, self.sw, self.dh, self.dw = kh, kw, sh, sw, dh, dw
        self.pt, self.pl, self.ow = pt, pl, ow
        self.eff_h, self.eff_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        self.need_w = (ow - 1) * sw + self.eff_w

    def block(self, image: int, y0: int, y1: int) -> np.ndarray:
        """The float32 input rows that output rows y0..y1 of one image read, shifted by
        the zero point and zero-padded: (rows, need_w, C).

        Only these rows are converted, so the data is still in cache when the taps / GEMM
        use it."""
        _, h, w, c = self.x.shape
        top = y0 * self.sh - self.pt
        n_rows = (y1 - 1 - y0) * self.sh + self.eff_h
        buf = np.zeros((n_rows, self.need_w, c), dtype=np.float32)
        r_lo, r_hi = max(top, 0), min(top + n_rows, h)
        c_hi = min(w, self.need_w - self.pl)
        if r_hi > r_lo and c_hi > 0:
            np.subtract(self.x[image, r_lo:r_hi, :c_hi], self.zp, dtype=np.float32,
                        out=buf[r_lo - top:r_hi - top, self.pl:self.pl + c_hi])
        return buf

    def windows(self, image: int, y0: int, y1: int) -> np.ndarray:
        """(rows, OW, KH, KW, C) float32 view for output rows y0..y1 of one image: what
        each output reads through each tap, in the filters' (KH, KW, C) order."""
        block = self.block(image, y0, y1)
        s0, s1, s2 = block.strides
        # Built directly (sliding_window_view's checks cost more than a small conv):
        # the last row read is (rows-1)*sh + (kh-1)*dh < block rows, likewise columns.
        return np.ndarray((y1 - y0, self.ow, self.kh, self.kw, block.shape[2]), np.float32,
                          buffer=block, strides=(self.sh * s0, self.sw * s1, self.dh * s0,
                                                 self.dw * s1, s2))

    def phases(self, image: int, y0: int, y1: int) -> list[np.ndarray]:
        """:meth:`block` split by column phase: ``phases[p][:, q]`` is padded column
        ``q * sw + p``. Built straight from the int8 input (one strided pass)."""
        sw = self.sw
        if sw == 1:
            return [self.block(image, y0, y1)]
        _, h, w, c = self.x.shape
        top = y0 * self.sh - self.pt
        n_rows = (y1 - 1 - y0) * self.sh + self.eff_h
        r_lo, r_hi = max(top, 0), min(top + n_rows, h)
        c_hi = min(w, self.need_w - self.pl)
        out = []
        for p in range(sw):
            width = len(range(p, self.need_w, sw))
            buf = np.zeros((n_rows, width, c), dtype=np.float32)
            first = (p - self.pl) % sw  # first input column landing in this phase
            if r_hi > r_lo and first < c_hi:
                src = self.x[image, r_lo:r_hi, first:c_hi:sw]
                q0 = (self.pl + first) // sw
                np.subtract(src, self.zp, dtype=np.float32,
                            out=buf[r_lo - top:r_hi - top, q0:q0 + src.shape[1]])
            out.append(buf)
        return out

    def taps(self, image: int, y0: int, y1: int):
        """Yield ``(i, j, view)`` per filter tap: the (rows, OW, C) input each output reads
        through tap (i, j). Columns are split by stride phase, so each view's (OW, C)
        plane is contiguous and numpy runs one long inner loop per row."""
        phases = self.phases(image, y0, y1)
        sw, rows = self.sw, y1 - y0
        for i in range(self.kh):
            r = i * self.dh
            for j in range(self.kw):
                col = j * self.dw
                ph, off = phases[col % sw], col // sw
                yield i, j, ph[r:r + (rows - 1) * self.sh + 1:self.sh, off:off + self.ow]


class _Requant:
    """Per-block tail: bias, int32 wrap, per-channel requantization, zero point, clamp.

    Three exact paths, fastest first: float64 arithmetic with everything folded into one
    per-channel constant when the accumulators are small enough for each step to stay
    below 2**53 (known from the bounds, or checked on the block); folded int64
    arithmetic; and the step-by-step TFLite form when the result could wrap int32.
    """

    def __init__(self, bias, multiplier, shift, output_zp, act_min, act_max, acc_bound):
        # Own copies: plans are reused, and the arguments may be views of device memory.
        bias = None if bias is None else np.array(bias, copy=True)
        multiplier = np.array(multiplier, dtype=np.int64, copy=True)
        shift = np.array(shift, dtype=np.int64, copy=True)
        if np.any((shift < -31) | (shift > 30)):
            raise InvalidCommand("requantization shift must be in [-31, 30]")
        self.bias, self.multiplier, self.shift = bias, multiplier, shift
        self.output_zp, self.act_min, self.act_max = int(output_zp), int(act_min), int(act_max)
        self.acc_bound = acc_bound
        bias_max = int(np.abs(bias.astype(np.int64)).max()) if bias is not None and bias.size else 0
        # Can the scaled value plus the zero point leave int32 (where TFLite would wrap)?
        gain = float(np.max(np.abs(multiplier) * np.exp2(shift.astype(np.float64)))) / 2.0 ** 31
        self.fast = (acc_bound + bias_max) * gain + 256 < 2.0 ** 31
        self.f64 = F64Requant(multiplier, shift, bias, self.output_zp) if self.fast else None
        self.f64_always = self.f64 is not None and acc_bound <= self.f64.limit

    @property
    def nbytes(self) -> int:
        """The bytes of the per-channel arrays the plan keeps (its own and its F64Requant's)."""
        return sum(v.nbytes for part in (self, self.f64) if part is not None
                   for v in vars(part).values() if isinstance(v, np.ndarray))

    def __call__(self, acc_f: np.ndarray, out_block: np.ndarray) -> None:
        if self.f64 is not None and self.f64.limit and (
                self.f64_always or max(-float(acc_f.min()), float(acc_f.max())) <= self.f64.limit):
            v = self.f64.apply(acc_f)
        else:
            acc = accumulate_bias(acc_f, self.bias, self.acc_bound)
            if not self.fast:
                scaled = multiply_by_quantized_multiplier(acc, self.multiplier, self.shift)
                store_int8(scaled, self.output_zp, self.act_min, self.act_max, out_block)
                return
            v = requantize_fixed_inplace(acc, self.multiplier, self.shift, self.output_zp)
        np.clip(v, self.act_min, self.act_max, out=v)
        np.copyto(out_block, v, casting="unsafe")


REQUANT_PLANS = 512
# What the kept plans may hold (their key bytes and arrays: ~96 bytes a channel). A client's
# convolution with millions of output channels, its bias changed at every job, made 100 MB a
# plan: 512 of them would take the memory other contexts' jobs on the core run in. The
# oldest plans go first; a plan larger than this alone is rebuilt at every call.
REQUANT_PLAN_BYTES = 32 << 20
_REQUANT_PLANS: OrderedDict[tuple, tuple[_Requant, int]] = OrderedDict()
_requant_held = 0


def _requant_plan(bias, multiplier, shift, output_zp, act_min, act_max, acc_bound) -> _Requant:
    """A :class:`_Requant`, reused while its parameters repeat (every inference of a model
    reruns the same layers; building the plan costs ~0.1 ms)."""
    global _requant_held
    key = (None if bias is None else bias.tobytes(), multiplier.dtype.str, multiplier.tobytes(),
           shift.dtype.str, shift.tobytes(),
           int(output_zp), int(act_min), int(act_max), int(acc_bound))
    kept = _REQUANT_PLANS.get(key)
    if kept is not None:
        _REQUANT_PLANS.move_to_end(key)
        return kept[0]
    plan = _Requant(bias, multiplier, shift, output_zp, act_min, act_max, acc_bound)
    cost = plan.nbytes + sum(len(part) for part in key if isinstance(part, bytes))
    if cost > REQUANT_PLAN_BYTES:
        return plan
    while _REQUANT_PLANS and (len(_REQUANT_PLANS) >= REQUANT_PLANS or _requant_held + cost > REQUANT_PLAN_BYTES):
        _requant_held -= _REQUANT_PLANS.popitem(last=False)[1][1]
    _REQUANT_PLANS[key] = (plan, cost)
    _requant_held += cost
    return plan


def requant_plan_bytes() -> int:
    """What the kept requantization plans hold now, estimated (at most REQUANT_PLAN_BYTES)."""
    return _requant_held


def _clear_requant_plans() -> None:
    global _requant_held
    _REQUANT_PLANS.clear()
    _requant_held = 0


caches.register("requant_plans", "conv requantization plans, by bias/multiplier/shift bytes "
                "(own copies of them: never invalidated; at most REQUANT_PLAN_BYTES)", None, _clear_requant_plans,
                entries=lambda: len(_REQUANT_PLANS))


def _prepare_filters(w: np.ndarray, groups: int) -> tuple[np.ndarray, int]:
    cout, k = w.shape[0], w[0].size
    wf = np.ascontiguousarray(w.reshape(groups, cout // groups, k).transpose(0, 2, 1),
                              dtype=np.float32)
    wf.flags.writeable = False
    row_abs = np.abs(w.reshape(cout, k).astype(np.int32)).sum(axis=1)
    return wf, int(row_abs.max()) if row_abs.size else 0


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
           stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
           out_hw: tuple[int, int], input_zp: int, output_zp: int,
           multiplier: np.ndarray, shift: np.ndarray,
           act_min: int = -128, act_max: int = 127,
           out: np.ndarray | None = None) -> np.ndarray:
    """int8 NHWC convolution, grouped when ``w``'s input depth divides ``x``'s.

    x: int8 (N, H, W, Cin); w: int8 (Cout, KH, KW, Cin / groups), zero point 0;
    bias: int32 (Cout,) or None; stride/dilation (h, w); padding (top, left) before the
    image (see ``npu_hw.ops.conv_geometry``); out_hw the output (OH, OW);
    multiplier/shift int32 (Cout,) or (1,). Returns int8 (N, OH, OW, Cout).
    """
    return _conv2d(x, w, bias, stride, dilation, padding, out_hw, input_zp, output_zp,
                   multiplier, shift, act_min, act_max, out)[0]


def conv2d_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                 stride: tuple[int, int], dilation: tuple[int, int], padding: tuple[int, int],
                 out_hw: tuple[int, int], input_zp: int, output_zp: int,
                 multiplier: np.ndarray, shift: np.ndarray,
                 act_min: int = -128, act_max: int = 127,
                 out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`conv2d` into ``out``, then a call that reruns it on the same arrays without
    checking or converting anything again; None when that is not possible (numpy path, or
    an operand had to be copied)."""
    return _conv2d(x, w, bias, stride, dilation, padding, out_hw, input_zp, output_zp,
                   multiplier, shift, act_min, act_max, out)[1]


def conv_groups(cin: int, w_shape: tuple[int, ...]) -> int:
    """How many groups a filter ``(Cout, KH, KW, Cin / groups)`` splits ``cin`` input channels into."""
    cout, cin_g = w_shape[0], w_shape[3]
    if cin_g == 0 or cin % cin_g or cout % (cin // cin_g):
        raise InvalidCommand(f"filter {w_shape} does not group input depth {cin}")
    return cin // cin_g


def _conv2d(x, w, bias, stride, dilation, padding, out_hw, input_zp, output_zp, multiplier,
            shift, act_min, act_max, out) -> tuple[np.ndarray, native_calls.BoundCall | None]:
    sh, sw, dh, dw, pt, pl, oh, ow = _check_common(
        x, w, stride, dilation, padding, out_hw, input_zp, output_zp, act_min, act_max)
    n, _, _, cin = x.shape
    cout, kh, kw, cin_g = w.shape
    groups = conv_groups(cin, w.shape)
    multiplier, shift = _check_quant(cout, bias, multiplier, shift)
    target, out = out, _check_out(out, (n, oh, ow, cout))
    k = kh * kw * cin_g
    bound_x = int8_offset_bound(-input_zp)
    if native.has_dnnl() and out.size:
        bound = bound_x * k * 128 + (int(np.abs(bias.astype(np.int64)).max()) if bias is not None else 0)
        if bound < 2 ** 31:     # no sum can wrap int32, where oneDNN's and TFLite's would differ
            bound_call = native_calls.conv_s8(x, w, bias, groups, (sh, sw), (dh, dw), (pt, pl),
                                              (oh, ow), input_zp, output_zp, multiplier, shift,
                                              act_min, act_max, out)
            return _deliver(out, target), bound_call if target is out else None
    # Filters as (groups, K, Cout/groups) float32, K ordered (KH, KW, Cin_g), and the
    # largest per-filter sum of |w|; cached across calls.
    wf, row_abs_max = weight_cache.converted(
        w, f"conv{groups}", lambda a: _prepare_filters(a, groups))
    chunk = gemm_chunk(k, bound_x, row_abs_max)
    finish = _requant_plan(bias, multiplier, shift, output_zp, act_min, act_max,
                           bound_x * row_abs_max)
    # 1x1 filters without padding read the input directly (strided rows/columns): no
    # padded block, no windows. The extent checks guarantee (oh-1)*sh < H, (ow-1)*sw < W.
    direct = kh == kw == 1 and pt == pl == 0
    geo = _Geometry(x, input_zp, kh, kw, sh, sw, dh, dw, pt, pl, ow)
    step = max(1, ROW_BLOCK_ELEMS // max(1, ow * cout))
    for image in range(n):
        for y0 in range(0, oh, step):
            y1 = min(oh, y0 + step)
            if direct:
                src = x[image, y0 * sh:(y1 - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw]
                cols = src.astype(np.float32).reshape(-1, cin)
                cols -= np.float32(input_zp)
            else:
                # (rows, OW, KH, KW, C) -> (rows*OW, KH*KW*C), the filter layout.
                cols = np.ascontiguousarray(geo.windows(image, y0, y1)).reshape(-1, kh * kw * cin)
            if groups == 1:
                acc = exact_gemm(cols, wf[0], chunk)
            else:
                cg = cols.reshape(cols.shape[0], kh * kw, groups, cin_g).transpose(2, 0, 1, 3)
                cg = cg.reshape(groups, cols.shape[0], k)
                acc = np.concatenate([exact_gemm(cg[g], wf[g], chunk)
                                      for g in range(groups)], axis=1)
            finish(acc, out[image, y0:y1].reshape(-1, cout))
    return _deliver(out, target), None


def depthwise_conv2d_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                           stride: tuple[int, int], dilation: tuple[int, int],
                           padding: tuple[int, int], out_hw: tuple[int, int],
                           input_zp: int, output_zp: int,
                           multiplier: np.ndarray, shift: np.ndarray,
                           act_min: int = -128, act_max: int = 127,
                           out: np.ndarray) -> native_calls.BoundCall | None:
    """:func:`depthwise_conv2d` into ``out``, then a call that reruns it on the same arrays
    (their contents at the time of the call) without checking or converting anything
    again; None when that is not possible (numpy path, or an operand had to be copied)."""
    depthwise_conv2d(x, w, bias, stride=stride, dilation=dilation, padding=padding,
                     out_hw=out_hw, input_zp=input_zp, output_zp=output_zp,
                     multiplier=multiplier, shift=shift, act_min=act_min, act_max=act_max, out=out)
    if native.library() is None or not out.size:
        return None
    sh, sw, dh, dw, pt, pl, oh, ow = _check_common(
        x, w, stride, dilation, padding, out_hw, input_zp, output_zp, act_min, act_max)
    return native_calls.bind_depthwise(x, w, bias, w.shape[3] // x.shape[3], (sh, sw), (dh, dw),
                                       (pt, pl), (oh, ow), input_zp, output_zp, multiplier,
                                       shift, act_min, act_max, out)


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                     stride: tuple[int, int], dilation: tuple[int, int],
                     padding: tuple[int, int], out_hw: tuple[int, int],
                     input_zp: int, output_zp: int,
                     multiplier: np.ndarray, shift: np.ndarray,
                     act_min: int = -128, act_max: int = 127,
                     out: np.ndarray | None = None) -> np.ndarray:
    """int8 NHWC depthwise convolution with depth multiplier ``Cout / Cin``.

    x: int8 (N, H, W, Cin); w: int8 (1, KH, KW, Cout) with output channel
    ``c * multiplier + m`` reading input channel ``c``; other arguments as :func:`conv2d`.
    """
    sh, sw, dh, dw, pt, pl, oh, ow = _check_common(
        x, w, stride, dilation, padding, out_hw, input_zp, output_zp, act_min, act_max)
    n, _, _, cin = x.shape
    one, kh, kw, cout = w.shape
    if one != 1 or cin == 0 or cout % cin:
        raise InvalidCommand(f"depthwise filter {w.shape} does not fit input depth {cin}")
    dm = cout // cin
    multiplier, shift = _check_quant(cout, bias, multiplier, shift)
    target, out = out, _check_out(out, (n, oh, ow, cout))
    if native.library() is not None:
        if out.size:
            native_calls.depthwise_s8(x, w, bias, dm, (sh, sw), (dh, dw), (pt, pl), (oh, ow),
                                      input_zp, output_zp, multiplier, shift, act_min,
                                      act_max, out)
        return _deliver(out, target)
    bound = kh * kw * int8_offset_bound(-input_zp) * max_abs(w)
    # float32 sums are exact below 2**24 (any 3x3..20x20 filter); beyond, float64.
    acc_type = np.float32 if bound < (1 << 24) else np.float64
    finish = _requant_plan(bias, multiplier, shift, output_zp, act_min, act_max, bound)
    geo = _Geometry(x, input_zp, kh, kw, sh, sw, dh, dw, pt, pl, ow)
    # Per tap and depth-multiplier index, the weights repeated along the output row: with
    # a (OW, C) operand the multiply runs one OW*C-long inner loop instead of OW loops of
    # C (2x faster for C <= 64).
    wf = np.empty((kh, kw, dm, ow, cin), np.float32)
    wf[...] = w.reshape(kh, kw, cin, dm).transpose(0, 1, 3, 2)[:, :, :, None, :]
    step = max(1, ROW_BLOCK_ELEMS // max(1, ow * cout))

    for b in range(n):
        for y0 in range(0, oh, step):
            y1 = min(oh, y0 + step)
            # One (rows, OW, C) accumulator per depth-multiplier index keeps the innermost
            # loop running along C; each tap is a whole-block multiply-add.
            acc = np.empty((dm, y1 - y0, ow, cin), dtype=acc_type)
            tmp = np.empty(acc.shape[1:], dtype=acc_type)
            for i, j, src in geo.taps(b, y0, y1):
                for m in range(dm):
                    if i == j == 0:
                        np.multiply(src, wf[0, 0, m], out=acc[m])
                    else:
                        np.multiply(src, wf[i, j, m], out=tmp)
                        acc[m] += tmp
            acc = acc.transpose(1, 2, 3, 0) if dm > 1 else acc[0]
            finish(acc.reshape(y1 - y0, ow, cout), out[b, y0:y1])
    return _deliver(out, target)
