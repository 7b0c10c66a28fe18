/* npu.h - the C API of the emulated NPU's runtime (libnpu_runtime.so).
 *
 * The seed runtime's calls (BlazeFace-style face detection on RGB pictures) plus generic
 * calls that run any model `npu run` accepts on raw tensors. Compile and link with the
 * flags `npu capi --cflags` and `npu capi --libs` print.
 *
 * Device and caches: the model runs on $NPU_DEVROOT/npu<$NPU_DEVICE> (defaults: /dev and
 * 0); .tflite and .onnx models are compiled through the compile cache under
 * $NPU_CACHE_DIR (default ~/.cache/npu-emu), so only the first load of a model compiles.
 *
 * Errors: every call that can fail returns a status (or 0 for a count or size) and leaves
 * a one-line message for npu_runtime_last_error() in the calling thread.
 *
 * Threads: every call may be made from any thread; calls on one handle from several
 * threads at once are safe (inferences on one handle run one after another per call).
 * A handle must not be used after npu_runtime_free().
 */
#ifndef NPU_H
#define NPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded model on the device. Opaque: never dereference it. */
typedef struct npu_runtime *npu_handle_t;

typedef enum npu_status {
    NPU_STATUS_OK = 0,
    NPU_STATUS_INVALID_ARGUMENT = 1,  /* NULL pointer, bad index, unknown handle, wrong length */
    NPU_STATUS_NOT_FOUND = 2,         /* the model or anchors file does not exist */
    NPU_STATUS_UNSUPPORTED_MODEL = 3, /* the file is no model we can compile, or not the kind the call needs */
    NPU_STATUS_DEVICE_ERROR = 4,      /* no device, the driver refused a request, a job failed */
    NPU_STATUS_TIMEOUT = 5,           /* a job ran past its timeout (the device stays usable) */
    NPU_STATUS_OUT_OF_MEMORY = 6,     /* device or host memory exhausted, or a quota reached */
    NPU_STATUS_INTERNAL_ERROR = 7     /* a bug: the message says where; details on stderr */
} npu_status_t;

/* One face: a box with corners in coordinates normalized to the picture (0..1, x to the
 * right, y down; a box may reach slightly outside 0..1 at the picture's border) and the
 * detector's score (0..1). */
typedef struct npu_detection {
    float x_min, y_min, x_max, y_max, score;
} npu_detection_t;

/* Face detection defaults: a detection needs a score >= 0.5; overlapping detections
 * (intersection over union > 0.3) are merged into their score-weighted mean, as
 * MediaPipe's face detector does. */
#define NPU_FACE_SCORE_THRESHOLD 0.5f
#define NPU_FACE_IOU_THRESHOLD 0.3f

/* The message of this thread's last call if it failed, "" if it succeeded. The pointer
 * stays valid until the thread's next call into this library. Never NULL. */
const char *npu_runtime_last_error(void);

/* ---- face detection (BlazeFace short range or a model with its outputs) ---- */

/* Load a face detector: model_path is a BlazeFace .tflite (float models are quantized to
 * int8 with calibration pictures, cached), a compiled .nlb or the model-zoo name
 * "blazeface". The model has one NHWC input and two outputs: box regressors [1][n][16]
 * and score logits [1][n][1].
 * anchors_bin_path: NULL to generate the n SSD anchors of BlazeFace short range for the
 * model's input size, or a file of n anchors, each four little-endian float32 values
 * x_center, y_center, width, height normalized to the input (a raw float32 [n][4] array,
 * 16*n bytes, no header). On success *out_handle is the detector; on failure it is NULL. */
npu_status_t npu_runtime_init_face_ssd(const char *model_path_utf8, const char *anchors_bin_path_utf8,
                                       npu_handle_t *out_handle);

/* The picture size infer_image takes: width, height and channels (3) of the model input. */
npu_status_t npu_runtime_get_input_size(npu_handle_t h, uint32_t *out_w, uint32_t *out_h, uint32_t *out_c);

/* Detect faces in one picture: image_rgb holds h*w*c bytes (rows top to bottom, pixels
 * left to right, R G B), already at the model's input size; any other image_byte_len is
 * refused with NPU_STATUS_INVALID_ARGUMENT. Writes up to max detections, best first, and
 * their number to *out_count (out_dets may be NULL when max is 0). */
npu_status_t npu_runtime_infer_image(npu_handle_t h, const uint8_t *image_rgb, uint32_t image_byte_len,
                                     npu_detection_t *out_dets, uint32_t max, uint32_t *out_count);

/* Free a handle of either kind and everything it holds on the device. NULL is ignored. */
void npu_runtime_free(npu_handle_t h);

/* ---- any model, raw tensors ---- */

/* Load a model: a .tflite, .onnx or .nlb file, or a model-zoo name (resnet8, blazeface,
 * kws, vww, anomaly). Float models are quantized to int8 by our compiler (random
 * calibration, as `npu run` does) and keep float32 inputs and outputs. */
npu_status_t npu_runtime_init(const char *model_path_utf8, npu_handle_t *out_handle);

/* npu_runtime_init for a model whose inputs have free dimensions (ONNX dim_param, TFLite
 * -1): input_shapes_utf8 gives their shapes as `npu compile --input-shape` takes them,
 * separated by ';' ("audio=1,16000;state=1,64", or "1,16000" for a single-input model);
 * NULL or "" is npu_runtime_init. A free leading batch dimension is 1 unless given; any
 * other free dimension must be given (else NPU_STATUS_INVALID_ARGUMENT naming them all),
 * as must a shape the model can take (input names, rank, positive sizes). */
npu_status_t npu_runtime_init_with_shapes(const char *model_path_utf8, const char *input_shapes_utf8,
                                          npu_handle_t *out_handle);

/* Number of input / output tensors; 0 (with an error message) for a bad handle. */
uint32_t npu_runtime_num_inputs(npu_handle_t h);
uint32_t npu_runtime_num_outputs(npu_handle_t h);

/* Size in bytes of input / output tensor i (dense, in the model's own element type:
 * int8 for an int8 model, float32 for a float one); 0 (with an error message) for a bad
 * handle or index. */
size_t npu_runtime_input_bytes(npu_handle_t h, uint32_t i);
size_t npu_runtime_output_bytes(npu_handle_t h, uint32_t i);

/* What a tensor holds: its element type, shape and quantization. */
typedef enum npu_dtype {
    NPU_DTYPE_FLOAT32 = 0,
    NPU_DTYPE_INT8 = 1,
    NPU_DTYPE_UINT8 = 2,
    NPU_DTYPE_INT16 = 3,
    NPU_DTYPE_INT32 = 4,
    NPU_DTYPE_INT64 = 5,
    NPU_DTYPE_FLOAT16 = 6,
    NPU_DTYPE_BOOL = 7
} npu_dtype_t;

#define NPU_MAX_DIMS 8
#define NPU_MAX_NAME 128

typedef struct npu_tensor_info {
    char name[NPU_MAX_NAME];      /* the model's name for the tensor, NUL-terminated (cut if longer) */
    npu_dtype_t dtype;            /* the element type of the bytes infer reads or writes */
    uint32_t rank;                /* number of dimensions (<= NPU_MAX_DIMS) */
    int64_t dims[NPU_MAX_DIMS];   /* the shape, outermost first; dims[rank..] are 0; -1: each run
                                   * decides (an output made on the CPU, docs/compiler.md) */
    size_t bytes;                 /* the dense size: what npu_runtime_input_bytes/output_bytes say;
                                   * 0 for an output with a -1 dim, which npu_runtime_infer refuses
                                   * (NPU_STATUS_UNSUPPORTED_MODEL): use the Python API for it */
    int quantized;                /* 1: real value = scale * (q - zero_point); 0: values are real */
    float scale;                  /* 0 when not quantized; a per-channel tensor gives its first channel's */
    int32_t zero_point;
} npu_tensor_info_t;

/* Describe input / output tensor i into *out. A model named "_int8" may still take and give
 * float32 tensors (quantized on the device): read dtype before filling a buffer. */
npu_status_t npu_runtime_input_info(npu_handle_t h, uint32_t i, npu_tensor_info_t *out);
npu_status_t npu_runtime_output_info(npu_handle_t h, uint32_t i, npu_tensor_info_t *out);

/* "float32", "int8", ...: the dtype's name ("unknown" for a value outside the enum). */
const char *npu_dtype_name(npu_dtype_t dtype);

/* Run one inference: inputs[i] points to input_bytes(h, i) bytes, outputs[i] to
 * output_bytes(h, i) writable bytes, for every input and output. */
npu_status_t npu_runtime_infer(npu_handle_t h, const void *const *inputs, void *const *outputs);

#ifdef __cplusplus
}
#endif

#endif /* NPU_H */
