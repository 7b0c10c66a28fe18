/* npu_runtime.c - the C half of libnpu_runtime.so (npu.h).
 *
 * Compiled into the cffi-embedded library built by libnpu.tools.c_runtime: Python.h and
 * embedded_python_start() come before this file. The public calls check their pointer
 * arguments here, then call the npu_py_* functions implemented in Python
 * (libnpu/tools/c_runtime.py), which report through a status out-parameter: a status
 * still STATUS_UNSET afterwards means Python never ran the call (its start-up failed).
 * The error message is thread-local, so threads never see each other's errors.
 */
#include <stdio.h>
#include <string.h>

#include "npu.h"
/* @NPU_PY_API@ the build puts here the prototypes of the npu_py_* functions implemented in
 * Python: c_runtime._API, the one list cffi also reads. */

#define STATUS_UNSET (-1)

static _Thread_local char last_error[1024];

/* Called by the Python side too: the message of the current call's failure. */
void npu_capi_set_error(const char *message)
{
    snprintf(last_error, sizeof last_error, "%s", message ? message : "");
}

const char *npu_runtime_last_error(void)
{
    return last_error;
}

static npu_status_t fail(npu_status_t status, const char *message)
{
    npu_capi_set_error(message);
    return status;
}

static void begin(void)
{
    last_error[0] = '\0';
    embedded_python_start();
}

static npu_status_t finish(int status)
{
    if (status == STATUS_UNSET)
        return fail(NPU_STATUS_INTERNAL_ERROR,
                    "libnpu's Python runtime could not start (its traceback is on stderr)");
    return (npu_status_t)status;
}

static npu_status_t init(const char *model_path, const char *anchors_path, int face, const char *shapes,
                         npu_handle_t *out)
{
    last_error[0] = '\0';
    if (out == NULL)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "out_handle is NULL");
    *out = NULL;
    if (model_path == NULL)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "model_path is NULL");
    int status = STATUS_UNSET;
    begin();
    npu_py_init(model_path, anchors_path, face, shapes, out, &status);
    return finish(status);
}

npu_status_t npu_runtime_init_face_ssd(const char *model_path_utf8, const char *anchors_bin_path_utf8,
                                       npu_handle_t *out_handle)
{
    return init(model_path_utf8, anchors_bin_path_utf8, 1, NULL, out_handle);
}

npu_status_t npu_runtime_init(const char *model_path_utf8, npu_handle_t *out_handle)
{
    return init(model_path_utf8, NULL, 0, NULL, out_handle);
}

npu_status_t npu_runtime_init_with_shapes(const char *model_path_utf8, const char *input_shapes_utf8,
                                          npu_handle_t *out_handle)
{
    return init(model_path_utf8, NULL, 0, input_shapes_utf8, out_handle);
}

npu_status_t npu_runtime_get_input_size(npu_handle_t h, uint32_t *out_w, uint32_t *out_h, uint32_t *out_c)
{
    last_error[0] = '\0';
    if (h == NULL || out_w == NULL || out_h == NULL || out_c == NULL)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "npu_runtime_get_input_size: NULL handle or output pointer");
    uint32_t whc[3] = {0, 0, 0};
    int status = STATUS_UNSET;
    begin();
    npu_py_input_size(h, whc, &status);
    if (status == NPU_STATUS_OK) {
        *out_w = whc[0];
        *out_h = whc[1];
        *out_c = whc[2];
    }
    return finish(status);
}

npu_status_t npu_runtime_infer_image(npu_handle_t h, const uint8_t *image_rgb, uint32_t image_byte_len,
                                     npu_detection_t *out_dets, uint32_t max, uint32_t *out_count)
{
    last_error[0] = '\0';
    if (out_count != NULL)
        *out_count = 0;
    if (h == NULL || image_rgb == NULL || out_count == NULL)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "npu_runtime_infer_image: NULL handle, image or out_count");
    if (out_dets == NULL && max > 0)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "npu_runtime_infer_image: out_dets is NULL but max > 0");
    int status = STATUS_UNSET;
    begin();
    npu_py_infer_image(h, image_rgb, image_byte_len, out_dets, max, out_count, &status);
    return finish(status);
}

void npu_runtime_free(npu_handle_t h)
{
    last_error[0] = '\0';
    if (h == NULL)
        return;
    begin();
    npu_py_free(h);
}

static uint32_t tensor_count(npu_handle_t h, int outputs)
{
    last_error[0] = '\0';
    if (h == NULL) {
        fail(NPU_STATUS_INVALID_ARGUMENT, "NULL handle");
        return 0;
    }
    uint32_t count = 0;
    int status = STATUS_UNSET;
    begin();
    npu_py_tensor_count(h, outputs, &count, &status);
    return finish(status) == NPU_STATUS_OK ? count : 0;
}

uint32_t npu_runtime_num_inputs(npu_handle_t h)
{
    return tensor_count(h, 0);
}

uint32_t npu_runtime_num_outputs(npu_handle_t h)
{
    return tensor_count(h, 1);
}

static size_t tensor_bytes(npu_handle_t h, int outputs, uint32_t i)
{
    last_error[0] = '\0';
    if (h == NULL) {
        fail(NPU_STATUS_INVALID_ARGUMENT, "NULL handle");
        return 0;
    }
    size_t bytes = 0;
    int status = STATUS_UNSET;
    begin();
    npu_py_tensor_bytes(h, outputs, i, &bytes, &status);
    return finish(status) == NPU_STATUS_OK ? bytes : 0;
}

size_t npu_runtime_input_bytes(npu_handle_t h, uint32_t i)
{
    return tensor_bytes(h, 0, i);
}

size_t npu_runtime_output_bytes(npu_handle_t h, uint32_t i)
{
    return tensor_bytes(h, 1, i);
}

npu_status_t npu_runtime_infer(npu_handle_t h, const void *const *inputs, void *const *outputs)
{
    last_error[0] = '\0';
    if (h == NULL || inputs == NULL || outputs == NULL)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "npu_runtime_infer: NULL handle, inputs or outputs");
    int status = STATUS_UNSET;
    begin();
    npu_py_infer(h, inputs, outputs, &status);
    return finish(status);
}

static npu_status_t tensor_info(npu_handle_t h, int outputs, uint32_t i, npu_tensor_info_t *out)
{
    last_error[0] = '\0';
    if (h == NULL || out == NULL)
        return fail(NPU_STATUS_INVALID_ARGUMENT, "NULL handle or info pointer");
    memset(out, 0, sizeof *out);
    int status = STATUS_UNSET;
    begin();
    npu_py_tensor_info(h, outputs, i, out, &status);
    return finish(status);
}

npu_status_t npu_runtime_input_info(npu_handle_t h, uint32_t i, npu_tensor_info_t *out)
{
    return tensor_info(h, 0, i, out);
}

npu_status_t npu_runtime_output_info(npu_handle_t h, uint32_t i, npu_tensor_info_t *out)
{
    return tensor_info(h, 1, i, out);
}

const char *npu_dtype_name(npu_dtype_t dtype)
{
    static const char *const names[] = {"float32", "int8", "uint8", "int16", "int32", "int64", "float16", "bool"};
    return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "unknown";
}
