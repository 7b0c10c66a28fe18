/* Every npu.h call on a model whose driver goes away while the program holds it.
 * Usage: runtime_driver_gone MODEL. Loads MODEL (a 3072-byte input, 10-byte output model
 * such as ResNet-8), runs it once, prints "ready", waits for a line on stdin (the test
 * stops the driver meanwhile), then calls every function of npu.h and prints one line
 * per call: "<call> <status> <last error>". Exits 0 once npu_runtime_free returned. */
#include <stdint.h>
#include <stdio.h>

#include "npu.h"

static void report(const char *call, int status)
{
    printf("%s %d %s\n", call, status, npu_runtime_last_error());
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    static int8_t input[3072], output[10];
    const void *inputs[1] = {input};
    void *outputs[1] = {output};
    npu_handle_t h = NULL;
    npu_status_t status = npu_runtime_init(argv[1], &h);
    if (status != NPU_STATUS_OK) {
        report("npu_runtime_init", status);
        return 1;
    }
    if ((status = npu_runtime_infer(h, inputs, outputs)) != NPU_STATUS_OK) {
        report("npu_runtime_infer", status);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    if (getchar() == EOF)
        return 1;
    report("npu_runtime_infer", npu_runtime_infer(h, inputs, outputs));
    report("npu_runtime_num_inputs", (int)npu_runtime_num_inputs(h));
    report("npu_runtime_num_outputs", (int)npu_runtime_num_outputs(h));
    report("npu_runtime_input_bytes", (int)npu_runtime_input_bytes(h, 0));
    report("npu_runtime_output_bytes", (int)npu_runtime_output_bytes(h, 0));
    uint32_t w, hh, c, count;
    report("npu_runtime_get_input_size", npu_runtime_get_input_size(h, &w, &hh, &c));
    report("npu_runtime_infer_image", npu_runtime_infer_image(h, (const uint8_t *)input, sizeof input, NULL, 0,
                                                              &count));
    npu_handle_t again = NULL;
    report("npu_runtime_init", npu_runtime_init(argv[1], &again));
    npu_runtime_free(h);
    report("npu_runtime_free", 0);
    return 0;
}
