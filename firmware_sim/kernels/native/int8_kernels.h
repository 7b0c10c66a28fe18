/*
 * The C kernels' interface: read by the C compiler (included by int8_kernels.c after
 * <stdint.h>) and by cffi (ffi.cdef), so it holds only constants and prototypes.
 * Arrays are C-contiguous; see int8_kernels.c for each function's contract.
 */

/* Return codes (0 is success). */
#define NPU_KERNEL_NO_MEMORY -1
#define NPU_KERNEL_BAD_SHIFT -2
#define NPU_KERNEL_NO_DNNL -3
#define NPU_KERNEL_DNNL_FAILED -4
#define NPU_KERNEL_EMPTY_WINDOW -5
#define NPU_KERNEL_BAD_EXPONENT -6

int npu_depthwise_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                     const int8_t *filter, int32_t kh, int32_t kw, int32_t dm,
                     const int32_t *bias,
                     int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                     int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                     int32_t input_offset, int32_t output_offset,
                     const int32_t *mult, const int32_t *shift, int32_t per_channel,
                     int32_t act_min, int32_t act_max, int8_t *out);

int npu_fully_connected_s8(const int8_t *x, int32_t rows, int32_t k,
                           const int8_t *w, int32_t n, const int32_t *bias,
                           int32_t input_offset, int32_t output_offset,
                           const int32_t *mult, const int32_t *shift, const double *scale,
                           int32_t per_channel, int32_t act_min, int32_t act_max,
                           int8_t *out);

/* out[i] = table[(uint8_t)a[i] << 8 | (uint8_t)b[i]]: an int8 binary op with fixed
   quantization as one 64K-entry table (ADD, MUL). */
void npu_table2_s8(const int8_t *a, const int8_t *b, int64_t n, const int8_t *table, int8_t *out);

/* Average pooling, NHWC, over the in-image part of each window (int64 sums, rounded half
   away from zero, clamped). Returns NPU_KERNEL_EMPTY_WINDOW if a window misses the image. */
int npu_avg_pool_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t c,
                    int32_t fh, int32_t fw, int32_t sh, int32_t sw, int32_t pt, int32_t pl,
                    int32_t oh, int32_t ow, int32_t act_min, int32_t act_max, int8_t *out);

/* Max pooling, NHWC, over the in-image part of each window, clamped to [act_min, act_max].
   Returns NPU_KERNEL_EMPTY_WINDOW if a window misses the image. */
int npu_max_pool_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t c,
                    int32_t fh, int32_t fw, int32_t sh, int32_t sw, int32_t pt, int32_t pl,
                    int32_t oh, int32_t ow, int32_t act_min, int32_t act_max, int8_t *out);

/* float32 -> int8: clamp(round(x / scale) + zero_point), the division in float32. */
void npu_quantize_f32_s8(const float *x, int64_t n, float scale, int32_t zero_point, int8_t *out);

/* int8 -> float32: float(double(scale) * (x - zero_point)). */
void npu_dequantize_s8_f32(const int8_t *x, int64_t n, float scale, int32_t zero_point, float *out);

/* int8 softmax over rows of `depth` (TFLite's reference arithmetic): exp_t, terms_t and
   valid_t are the per-parameter tables indexed by the distance below the row maximum
   (kernels/activations.py). Returns NPU_KERNEL_BAD_EXPONENT when a row's reciprocal
   exponent leaves [0, 31]. */
int npu_softmax_s8(const int8_t *x, int32_t rows, int32_t depth, const int32_t *exp_t,
                   const int32_t *terms_t, const int8_t *valid_t, int8_t *out);

/* 1 when the library was built with oneDNN (npu_conv_s8 available), else 0. */
int npu_have_dnnl(void);

int npu_conv_s8(const int8_t *x, int32_t n, int32_t h, int32_t w, int32_t cin,
                const int8_t *filter, int32_t cout, int32_t kh, int32_t kw, int32_t groups,
                const int32_t *bias,
                int32_t stride_h, int32_t stride_w, int32_t dil_h, int32_t dil_w,
                int32_t pad_top, int32_t pad_left, int32_t out_h, int32_t out_w,
                int32_t input_offset, int32_t output_offset,
                const int32_t *mult, const int32_t *shift, int32_t per_channel,
                int32_t act_min, int32_t act_max, int8_t *out);

/* The arguments of npu_conv_s8 / npu_depthwise_s8 in one struct, for calls prepared once and
   rerun for every job: cffi converts each Python argument on every call, 1.5 us for 27 of
   them against 0.15 us for one pointer. `groups` is npu_conv_s8's, `depth_multiplier`
   npu_depthwise_s8's (`cout` is then cin * depth_multiplier). */
struct npu_conv_call {
    const int8_t *x;
    int32_t n, h, w, cin;
    const int8_t *filter;
    int32_t cout, kh, kw, groups, depth_multiplier;
    const int32_t *bias;
    int32_t stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, out_h, out_w;
    int32_t input_offset, output_offset;
    const int32_t *mult, *shift;
    int32_t per_channel, act_min, act_max;
    int8_t *out;
};

/* npu_conv_s8 and npu_depthwise_s8 on a struct's arguments. */
int npu_conv_call(const struct npu_conv_call *c);
int npu_depthwise_call(const struct npu_conv_call *c);

/* The other kernels' arguments as structs, so that every rerun is one pointer argument
   (struct npu_step) and a job whose tasks are all C calls runs as one array of them. */
struct npu_fc_call {
    const int8_t *x;
    int32_t rows, k;
    const int8_t *w;
    int32_t n;
    const int32_t *bias;
    int32_t input_offset, output_offset;
    const int32_t *mult, *shift;
    const double *scale;
    int32_t per_channel, act_min, act_max;
    int8_t *out;
};

struct npu_table2_call {
    const int8_t *a, *b;
    int64_t n;
    const int8_t *table;
    int8_t *out;
};

/* Average or max pooling (the step's kind says which). */
struct npu_pool_call {
    const int8_t *x;
    int32_t n, h, w, c, fh, fw, sh, sw, pt, pl, oh, ow, act_min, act_max;
    int8_t *out;
};

/* QUANTIZE (float x, int8 out) or DEQUANTIZE (int8 x, float out): the step's kind says which. */
struct npu_convert_call {
    const void *x;
    int64_t n;
    float scale;
    int32_t zero_point;
    void *out;
};

struct npu_softmax_call {
    const int8_t *x;
    int32_t rows, depth;
    const int32_t *exp_t, *terms_t;
    const int8_t *valid_t;
    int8_t *out;
};

/* A whole int8 LSTM layer (kernels/lstm.py's formula, LiteRT's 8x8->16 cell): x is
   [steps, batch, n_input] (or [batch, steps, n_input] with batch_major), out likewise with
   n_cell; w [4, n_cell, n_input], r [4, n_cell, n_cell], bias [8, n_cell] (effective),
   mult/shift [8]; the tables hold 65536 int16 entries indexed by the int16 input + 32768.
   h_in/c_in are copied to h_out/c_out first (they may be the same buffers), which then hold
   the last step's states. */
struct npu_lstm_call {
    const int8_t *x;
    int32_t steps, batch, n_input, n_cell, batch_major;
    const int8_t *w, *r;
    const int32_t *bias, *mult, *shift;
    const int16_t *sigmoid, *tanh_gate, *tanh_cell;
    int32_t cell_shift, cell_clip, hidden_mult, hidden_shift, hidden_zp;
    const int8_t *h_in;
    const int16_t *c_in;
    int8_t *h_out;
    int16_t *c_out;
    int8_t *out;
};

int npu_lstm_s8(const struct npu_lstm_call *c);

/* Step kinds: which kernel a struct npu_step's `call` is for. */
#define NPU_STEP_CONV 1
#define NPU_STEP_DEPTHWISE 2
#define NPU_STEP_FC 3
#define NPU_STEP_TABLE2 4
#define NPU_STEP_AVG_POOL 5
#define NPU_STEP_MAX_POOL 6
#define NPU_STEP_QUANTIZE 7
#define NPU_STEP_DEQUANTIZE 8
#define NPU_STEP_SOFTMAX 9
#define NPU_STEP_LSTM 21

/* Data movement and table kernels (data_kernels.c). Shapes and strides are int64 per axis,
   at most NPU_MOVE_MAX_RANK axes; strides of a copy are in bytes, elements are 1, 2 or 4
   bytes (`elem`). */
#define NPU_MOVE_MAX_RANK 6

/* out = x over `shape` (RESHAPE, TRANSPOSE, STRIDED_SLICE: a view of x; CONCATENATION: one
   input into its slice of the output). */
struct npu_copy_call {
    const void *x;
    void *out;
    int32_t rank, elem;
    int64_t shape[6], x_stride[6], out_stride[6];
};

/* Constant padding of contiguous x into contiguous out (`elem` 1 or 2 bytes). */
struct npu_pad_call {
    const void *x;
    void *out;
    int32_t rank, elem, value;
    int64_t in_shape[6], before[6], after[6];
};

/* out[i] = table[uint8(x[i])] (x int8: 256 entries) or table[uint16(x[i])] (x int16: 65536
   entries); `in_bytes` / `out_bytes` (1 or 2) are x's and the table's (and out's) element
   sizes. */
struct npu_lut_call {
    const void *x;
    int64_t n;
    const void *table;
    void *out;
    int32_t in_bytes, out_bytes;
};

/* npu_table2_s8 over broadcast operands: out (contiguous, `shape`) from a and b read with
   element strides (0 along a broadcast axis). */
struct npu_table2b_call {
    const int8_t *a, *b;
    const int8_t *table;
    int8_t *out;
    int32_t rank;
    int64_t shape[6], a_stride[6], b_stride[6];
};

/* MEAN and SUM (pooling.mean's, reduce.reduce_sum's arithmetic, `reduce` NPU_SUMS_ADD):
   x over `shape` with element strides, summed in int64 into `sums` (`outputs` entries,
   `sum_stride` 0 along a reduced axis), less zp_total (input zero point x count),
   requantized by multiplier/shift, plus output_zp, clamped; the max and min reductions
   (NPU_SUMS_LARGEST / _SMALLEST): the largest / smallest value, as it is; the L2 norm
   (NPU_SUMS_SQUARES, reduce.reduce_l2's formula): the sum of (x - input_zp)**2, its sqrt
   times scale in double, rounded half away from zero, plus output_zp, clamped. */
#define NPU_SUMS_ADD 0
#define NPU_SUMS_LARGEST 1
#define NPU_SUMS_SMALLEST 2
#define NPU_SUMS_SQUARES 3
struct npu_mean_call {
    const void *x;
    int64_t *sums;
    void *out;
    int32_t rank, elem;
    int64_t shape[6], x_stride[6], sum_stride[6];
    int64_t outputs, zp_total;
    int32_t multiplier, shift, output_zp, act_min, act_max, reduce, input_zp;
    double scale;
};

/* GATHER of int8 rows (inner bytes each) along the middle axis by int32 indices. */
#define NPU_KERNEL_BAD_INDEX -8
struct npu_gather_call {
    const int8_t *x;
    const int32_t *indices;
    int8_t *out;
    int64_t outer, axis, inner, count;
};

/* Several steps as one (a CONCATENATION's copies). */
struct npu_sequence_call {
    const struct npu_step *steps;
    int32_t count;
};

int npu_copy(const struct npu_copy_call *c);
int npu_pad(const struct npu_pad_call *c);
int npu_lut(const struct npu_lut_call *c);
int npu_table2_broadcast(const struct npu_table2b_call *c);
int npu_mean(const struct npu_mean_call *c);
int npu_sequence(const struct npu_sequence_call *c);
int npu_gather(const struct npu_gather_call *c);

#define NPU_STEP_COPY 10
#define NPU_STEP_PAD 11
#define NPU_STEP_LUT 12
#define NPU_STEP_TABLE2_BROADCAST 13
#define NPU_STEP_MEAN 14
#define NPU_STEP_SEQUENCE 15
#define NPU_STEP_GATHER 20

/* int8 L2_NORMALIZATION over the last axis (norm_kernels.c): rows x depth values, output
   scale 1/128, zero point 0. */
struct npu_l2norm_call {
    const int8_t *x;
    int64_t rows, depth;
    int32_t input_zp;
    int8_t *out;
};
int npu_l2norm(const struct npu_l2norm_call *c);
#define NPU_STEP_L2NORM 60

/* int8 LOG_SOFTMAX over the last axis (norm_kernels.c; kernels/normalization.py's
   log_softmax, the reference): rows x depth values, output scale 16/256, zero point 127.
   An element `below` its row's maximum (0..255) has the scaled difference diff_q5_t[below]
   and the exponential term terms_t[below] (0 under diff_min): both a parameter set's
   tables, 256 entries; the row's log of its sum is computed per row. */
struct npu_log_softmax_call {
    const int8_t *x;
    int64_t rows, depth;
    const int32_t *diff_q5_t, *terms_t;
    int32_t reverse_scaling_divisor, reverse_scaling_right_shift, diff_min;
    int8_t *out;
};
int npu_log_softmax(const struct npu_log_softmax_call *c);
#define NPU_STEP_LOG_SOFTMAX 61

/* int16 x int8 kernels (int16_kernels.c): int16 activations (zero point 0), int8 weights,
   int64 biases; requantized as TFLite's 16x8 reference kernels do. `depth_multiplier` is
   the depthwise kernel's (cout = cin * depth_multiplier), `groups` the convolution's. */
struct npu_conv16_call {
    const int16_t *x;
    int32_t n, h, w, cin;
    const int8_t *filter;
    int32_t cout, kh, kw, groups, depth_multiplier;
    const int64_t *bias;
    int32_t stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, out_h, out_w;
    const int32_t *mult, *shift;
    int32_t per_channel, act_min, act_max;
    int16_t *out;
};

struct npu_fc16_call {
    const int16_t *x;
    int32_t rows, k;
    const int8_t *w;
    int32_t n;
    const int64_t *bias;
    const double *scale;
    int32_t per_channel, act_min, act_max;
    int16_t *out;
};

/* int16 ADD, SUB, MUL or PRELU (zero points 0) of a and b read with element strides (0 along a
   broadcast axis) into contiguous out; `params` holds one row per output channel (the last
   axis; `channels` rows, 1 for per-tensor): ADD and SUB m1, s1, m2, s2, mo, so, MUL m, s, PRELU
   m1, s1, m2, s2 (b: the slopes alpha), MAXIMUM and MINIMUM none (act_min / act_max unused). */
#define NPU_BINARY16_ADD 0
#define NPU_BINARY16_MUL 1
#define NPU_BINARY16_PRELU 2
#define NPU_BINARY16_MAXIMUM 3
#define NPU_BINARY16_MINIMUM 4
#define NPU_BINARY16_SUB 5
struct npu_binary16_call {
    const int16_t *a, *b;
    int16_t *out;
    int32_t rank;
    int64_t shape[6], a_stride[6], b_stride[6];
    int32_t kind, left_shift;
    int64_t channels;
    const int32_t *params;
    int32_t act_min, act_max;
};

int npu_binary16(const struct npu_binary16_call *c);
int npu_conv16x8(const struct npu_conv16_call *c);
int npu_depthwise16x8(const struct npu_conv16_call *c);
int npu_fully_connected16x8(const struct npu_fc16_call *c);

#define NPU_STEP_CONV16 16
#define NPU_STEP_DEPTHWISE16 17
#define NPU_STEP_FC16 18
#define NPU_STEP_BINARY16 19

/* int16 x int16 kernels and int16 pooling (int16x16_kernels.c), the arithmetic of
   kernels/int16x16.py and kernels/pooling.py: exact int64 sums plus the bias (clipped to
   +-2**62), saturated to +-2**47, requantized as the 16x8 kernels. A weight of -32768 (the
   int16 weights are symmetric) is refused with NPU_KERNEL_BAD_WEIGHT. */
#define NPU_KERNEL_BAD_WEIGHT -20
struct npu_conv16x16_call {
    const int16_t *x;
    int32_t n, h, w, cin;
    const int16_t *filter;
    int32_t cout, kh, kw, groups, depth_multiplier;
    const int64_t *bias;
    int32_t stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, out_h, out_w;
    const int32_t *mult, *shift;
    int32_t per_channel, act_min, act_max;
    int16_t *out;
};

struct npu_fc16x16_call {
    const int16_t *x;
    int32_t rows, k;
    const int16_t *w;
    int32_t n;
    const int64_t *bias;
    const double *scale;
    int32_t per_channel, act_min, act_max;
    int16_t *out;
};

/* Average or max pooling of int16 NHWC x (the step's kind says which), as npu_pool_call. */
struct npu_pool16_call {
    const int16_t *x;
    int32_t n, h, w, c, fh, fw, sh, sw, pt, pl, oh, ow, act_min, act_max;
    int16_t *out;
};

int npu_conv16x16(const struct npu_conv16x16_call *c);
int npu_depthwise16x16(const struct npu_conv16x16_call *c);
int npu_fully_connected16x16(const struct npu_fc16x16_call *c);
int npu_pool16(const struct npu_pool16_call *c, int32_t max);

#define NPU_STEP_CONV16X16 30
#define NPU_STEP_DEPTHWISE16X16 31
#define NPU_STEP_FC16X16 32
#define NPU_STEP_AVG_POOL16 33
#define NPU_STEP_MAX_POOL16 34
/* QUANTIZE float32 -> int16 and DEQUANTIZE int16 -> float32 (npu_convert_call), as the int8
   conversions with int16's range. */
#define NPU_STEP_QUANTIZE16 35
#define NPU_STEP_DEQUANTIZE16 36
void npu_quantize_f32_s16(const float *x, int64_t n, float scale, int32_t zero_point, int16_t *out);
void npu_dequantize_s16_f32(const int16_t *x, int64_t n, float scale, int32_t zero_point, float *out);

/* int16 BATCH_MATMUL (int16x16_kernels.c, kernels/matmul.py's matmul_int16: zero points 0,
   exact int64 sums, requantized as the 16x8 kernels): output batch b (rows x cols, row-major
   at out + b * rows * cols) of the lhs batch starting at lhs + lhs_at[b], element (r, d) at
   r * lhs_row + d * lhs_depth, and the rhs batch at rhs + rhs_at[b], element (d, c) at
   d * rhs_depth + c * rhs_col (the strides say whether an operand is stored transposed). */
struct npu_matmul16_call {
    const int16_t *lhs, *rhs;
    int16_t *out;
    int64_t batches;
    const int64_t *lhs_at, *rhs_at;
    int64_t rows, depth, cols, lhs_row, lhs_depth, rhs_depth, rhs_col;
    int32_t multiplier, shift, act_min, act_max;
};

int npu_matmul16(const struct npu_matmul16_call *c);

#define NPU_STEP_MATMUL16 37

/* int8 BATCH_MATMUL (int8_kernels.c, kernels/matmul.py's matmul_int8): the operands laid out
   as npu_matmul16_call's, int32 sums of (lhs - lhs_zp)(rhs - rhs_zp), requantized with
   MultiplyByQuantizedMultiplier (double rounding), plus output_zp, clamped. */
struct npu_matmul8_call {
    const int8_t *lhs, *rhs;
    int8_t *out;
    int64_t batches;
    const int64_t *lhs_at, *rhs_at;
    int64_t rows, depth, cols, lhs_row, lhs_depth, rhs_depth, rhs_col;
    int32_t lhs_zp, rhs_zp, output_zp, multiplier, shift, act_min, act_max;
};

int npu_matmul8(const struct npu_matmul8_call *c);

#define NPU_STEP_MATMUL8 38

/* RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR of int8 or int16 (`elem` bytes) NHWC x (n, h, w, c)
   into out (n, oh, ow, c) (resize_kernels.c): output row oy reads source rows y0[oy] (and
   y1[oy], weight fy[oy] / 1024 for bilinear), column ox columns x0[ox] (x1[ox], fx[ox]); the
   indices and fractions are kernels/resize.py's. An index outside the image: NPU_KERNEL_BAD_STEP. */
struct npu_resize_call {
    const void *x;
    void *out;
    int32_t elem, bilinear, n, h, w, c, oh, ow;
    const int32_t *y0, *y1, *fy, *x0, *x1, *fx;
};

int npu_resize(const struct npu_resize_call *c);

#define NPU_STEP_RESIZE 50

/* int16 SOFTMAX over `rows` rows of `depth` (softmax16_kernels.c, kernels/int16x8.py's
   arithmetic) with its exp and reciprocal tables (513 entries each); a row whose exps sum to
   zero or less: NPU_KERNEL_SOFTMAX_ZERO_SUM, nothing written. */
#define NPU_KERNEL_SOFTMAX_ZERO_SUM -21
struct npu_softmax16_call {
    const int16_t *x;
    int32_t rows, depth, multiplier, left_shift;
    const int16_t *exp_lut, *recip_lut;
    int16_t *out;
};

int npu_softmax16(const struct npu_softmax16_call *c);

#define NPU_STEP_SOFTMAX16 51

/* TRANSPOSE_CONV of NHWC x (n, h, w, cin) with int8 filter (cout, kh, kw, cin) into out (n, oh,
   ow, cout) (transpose_conv_kernels.c, kernels/transpose_conv.py's arithmetic): stride sh, sw,
   padding pt, pl; mult / shift per channel or one. x and out int8, bias int32 (cout) or NULL;
   with wide, x and out int16 and bias int64 (TFLite's 16x8 scheme: zero points 0). */
struct npu_transpose_conv_call {
    const void *x;
    int32_t n, h, w, cin;
    const int8_t *filter;
    int32_t cout, kh, kw, sh, sw, pt, pl, oh, ow;
    const void *bias;
    const int32_t *mult, *shift;
    int32_t per_channel, input_zp, output_zp, act_min, act_max, wide;
    void *out;
};

int npu_transpose_conv(const struct npu_transpose_conv_call *c);

#define NPU_STEP_TRANSPOSE_CONV 52

/* One prepared kernel call: `call` points to the struct of `kind` (npu_conv_call for CONV and
   DEPTHWISE, npu_pool_call for both pools, npu_convert_call for both conversions). */
struct npu_step {
    int32_t kind;
    const void *call;
};

/* Runs one step; returns its kernel's status (an unknown kind is NPU_KERNEL_BAD_STEP). */
#define NPU_KERNEL_BAD_STEP -7
int npu_step_run(const struct npu_step *step);

/* Runs steps[0..count) in order and stops at the first that fails: returns its status and sets
   *done to its position; on success returns 0 with *done = count. */
int npu_steps_run(const struct npu_step *steps, int32_t count, int32_t *done);
