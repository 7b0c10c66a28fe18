/* run_model: any model through the C API's generic calls, on raw tensors.
 *
 *   run_model MODEL OUTPUT_PREFIX [INPUT.bin ...]
 *
 * Each INPUT.bin holds one input tensor's bytes in the type npu_runtime_input_info gives
 * (printed for every tensor: a model named "_int8" may take float32), in the model's input
 * order; zeros when omitted. Writes OUTPUT_PREFIX<i>.bin for each output. Written only
 * against npu.h.
 * Build: cc run_model.c $(npu capi --cflags) $(npu capi --libs) -o run_model
 */
#include <stdio.h>
#include <stdlib.h>

#include "npu.h"

static int failed(const char *call, npu_status_t status)
{
    fprintf(stderr, "%s: status %d: %s\n", call, (int)status, npu_runtime_last_error());
    return 1;
}

/* "input 0 'x': int8 [1, 32, 32, 3], 3072 bytes, scale 0.0039 zero point -128" */
static void print_tensor(const char *kind, uint32_t i, const npu_tensor_info_t *t)
{
    printf("%s %u '%s': %s [", kind, i, t->name, npu_dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->rank; d++)
        printf("%s%lld", d ? ", " : "", (long long)t->dims[d]);
    printf("], %zu bytes", t->bytes);
    if (t->quantized)
        printf(", scale %g zero point %d", (double)t->scale, (int)t->zero_point);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL OUTPUT_PREFIX [INPUT.bin ...]\n", argv[0]);
        return 2;
    }
    npu_handle_t model = NULL;
    npu_status_t status = npu_runtime_init(argv[1], &model);
    if (status != NPU_STATUS_OK)
        return failed("npu_runtime_init", status);

    uint32_t n_in = npu_runtime_num_inputs(model), n_out = npu_runtime_num_outputs(model);
    if (argc - 3 != 0 && (uint32_t)(argc - 3) != n_in) {
        fprintf(stderr, "the model takes %u inputs; %d files given\n", n_in, argc - 3);
        npu_runtime_free(model);
        return 2;
    }
    void **inputs = calloc(n_in, sizeof *inputs), **outputs = calloc(n_out, sizeof *outputs);
    int rc = inputs == NULL || outputs == NULL;
    for (uint32_t i = 0; i < n_in && rc == 0; i++) {
        npu_tensor_info_t info;
        status = npu_runtime_input_info(model, i, &info);
        if (status != NPU_STATUS_OK) {
            rc = failed("npu_runtime_input_info", status);
            break;
        }
        print_tensor("input", i, &info);
        size_t bytes = info.bytes;
        inputs[i] = calloc(bytes, 1);
        if (inputs[i] == NULL) {
            rc = 1;
        } else if (argc > 3) {
            FILE *f = fopen(argv[3 + i], "rb");
            if (f == NULL || fread(inputs[i], 1, bytes, f) != bytes || fgetc(f) != EOF) {
                fprintf(stderr, "%s: cannot read exactly %zu bytes (input %u)\n", argv[3 + i], bytes, i);
                rc = 2;
            }
            if (f != NULL)
                fclose(f);
        }
    }
    for (uint32_t i = 0; i < n_out && rc == 0; i++) {
        npu_tensor_info_t info;
        status = npu_runtime_output_info(model, i, &info);
        if (status != NPU_STATUS_OK) {
            rc = failed("npu_runtime_output_info", status);
            break;
        }
        print_tensor("output", i, &info);
        outputs[i] = calloc(info.bytes, 1);
        rc = outputs[i] == NULL;
    }
    if (rc == 0) {
        status = npu_runtime_infer(model, (const void *const *)inputs, (void *const *)outputs);
        if (status != NPU_STATUS_OK)
            rc = failed("npu_runtime_infer", status);
    }
    for (uint32_t i = 0; i < n_out && rc == 0; i++) {
        char path[4096];
        size_t bytes = npu_runtime_output_bytes(model, i);
        snprintf(path, sizeof path, "%s%u.bin", argv[2], i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(outputs[i], 1, bytes, f) != bytes) {
            perror(path);
            rc = 1;
        }
        if (f != NULL)
            fclose(f);
        printf("output %u: %zu bytes -> %s\n", i, bytes, path);
    }
    for (uint32_t i = 0; inputs && i < n_in; i++)
        free(inputs[i]);
    for (uint32_t i = 0; outputs && i < n_out; i++)
        free(outputs[i]);
    free(inputs);
    free(outputs);
    npu_runtime_free(model);
    return rc;
}
