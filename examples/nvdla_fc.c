/* nvdla_fc: NVDLA's portability layer in C on the emulated NPU - no Python involved.
 *
 * Allocates device memory, fills it through the CPU mappings, and submits one job of two
 * tasks: a DMA copy of 64 KiB and an int8 FULLY_CONNECTED layer (2 rows x 16 inputs ->
 * 8 outputs, per-tensor requantization). Checks both results against the same arithmetic
 * done here on the CPU, checks three refusals (an empty task, a foreign memory, an IOMMU
 * fault, after which the device still works), then frees everything. Prints "ok", exit 0.
 * Build: cc nvdla_fc.c $(npu capi --nvdla --cflags) $(npu capi --nvdla --libs) -o nvdla_fc
 * Run:   NPU_DEVROOT=<devroot> ./nvdla_fc   (device instance 0)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "npu_tasks.h"
#include "nvdla_port.h"

#define COPY_BYTES 65536
#define ROWS 2
#define IN 16
#define OUT 8

#define CHECK(call)                                                          \
    do {                                                                     \
        NvError e_ = (call);                                                 \
        if (e_ != NvSuccess) {                                               \
            NvDlaDebugPrintf("%s failed: NvError %d\n", #call, (int)e_);     \
            return 1;                                                        \
        }                                                                    \
    } while (0)

/* The chip's FULLY_CONNECTED, default requantization: one rounding of
 * acc * multiplier / 2^(31 - shift), ties away from zero; + output zero point; clamp. */
static int8_t requantize(int32_t acc, int32_t multiplier, int32_t shift, int32_t zp, int32_t lo, int32_t hi)
{
    int64_t product = (int64_t)acc * multiplier;
    int total = 31 - shift;
    int64_t half = (int64_t)1 << (total - 1);
    int64_t magnitude = ((product < 0 ? -product : product) + half) >> total;
    int64_t v = (product < 0 ? -magnitude : magnitude) + zp;
    return (int8_t)(v < lo ? lo : v > hi ? hi : v);
}

int main(void)
{
    void *session = NULL, *device = NULL;
    CHECK(NvDlaInitialize(&session));
    CHECK(NvDlaOpen(session, 0, &device));

    /* a task's command buffer starts at offset 0 of its first memory: one memory per task */
    void *src, *dst, *input, *weights, *bias, *output, *copy_cmd, *fc_cmd;
    void *src_p, *dst_p, *input_p, *weights_p, *bias_p, *output_p, *copy_cmd_p, *fc_cmd_p;
    CHECK(NvDlaAllocMem(session, device, &src, &src_p, COPY_BYTES, NvDlaHeap_System));
    CHECK(NvDlaAllocMem(session, device, &dst, &dst_p, COPY_BYTES, NvDlaHeap_System));
    CHECK(NvDlaAllocMem(session, device, &input, &input_p, ROWS * IN, NvDlaHeap_System));
    CHECK(NvDlaAllocMem(session, device, &weights, &weights_p, OUT * IN, NvDlaHeap_SRAM));
    CHECK(NvDlaAllocMem(session, device, &bias, &bias_p, OUT * sizeof(int32_t), NvDlaHeap_System));
    CHECK(NvDlaAllocMem(session, device, &output, &output_p, ROWS * OUT, NvDlaHeap_System));
    CHECK(NvDlaAllocMem(session, device, &copy_cmd, &copy_cmd_p, NPU_TASK_DMA_COPY_SIZE, NvDlaHeap_System));
    CHECK(NvDlaAllocMem(session, device, &fc_cmd, &fc_cmd_p, NPU_TASK_FULLY_CONNECTED_SIZE, NvDlaHeap_System));

    uint8_t *s = src_p;
    for (int i = 0; i < COPY_BYTES; i++)
        s[i] = (uint8_t)(i * 7 + 3);
    memset(dst_p, 0, COPY_BYTES);
    int8_t *x = input_p, *w = weights_p;
    int32_t *b = bias_p;
    for (int i = 0; i < ROWS * IN; i++)
        x[i] = (int8_t)((i * 37) % 255 - 127);
    for (int i = 0; i < OUT * IN; i++)
        w[i] = (int8_t)((i * 53) % 251 - 125);
    for (int o = 0; o < OUT; o++)
        b[o] = (o - 4) * 1000;
    memset(output_p, 0x55, ROWS * OUT);

    NvU64 a_src, a_dst, a_in, a_w, a_b, a_out;
    CHECK(NvDlaMemGetAddress(src, &a_src));
    CHECK(NvDlaMemGetAddress(dst, &a_dst));
    CHECK(NvDlaMemGetAddress(input, &a_in));
    CHECK(NvDlaMemGetAddress(weights, &a_w));
    CHECK(NvDlaMemGetAddress(bias, &a_b));
    CHECK(NvDlaMemGetAddress(output, &a_out));

    const int32_t input_zp = 3, output_zp = -5, multiplier = 1518500250, shift = -9;
    struct npu_task_dma_copy *copy = copy_cmd_p;
    *copy = (struct npu_task_dma_copy){ .opcode = NPU_OP_DMA_COPY, .size = NPU_TASK_DMA_COPY_SIZE,
                                        .src = a_src, .dst = a_dst, .length = COPY_BYTES };
    struct npu_task_fully_connected *fc = fc_cmd_p;
    *fc = (struct npu_task_fully_connected){
        .opcode = NPU_OP_FULLY_CONNECTED, .size = NPU_TASK_FULLY_CONNECTED_SIZE,
        .input = a_in, .weights = a_w, .bias = a_b, .output = a_out,
        .rows = ROWS, .in_features = IN, .out_features = OUT, .input_zp = input_zp, .output_zp = output_zp,
        .multiplier = multiplier, .shift = shift, .act_min = -128, .act_max = 127 };

    NvDlaTask tasks[2] = {
        { .task_id = 1, .num_addresses = 3, .command_size = NPU_TASK_DMA_COPY_SIZE,
          .address_list = { copy_cmd, src, dst } },
        { .task_id = 2, .num_addresses = 5, .command_size = NPU_TASK_FULLY_CONNECTED_SIZE,
          .address_list = { fc_cmd, input, weights, bias, output } },
    };
    CHECK(NvDlaSubmit(session, device, tasks, 2));

    if (memcmp(src_p, dst_p, COPY_BYTES) != 0) {
        NvDlaDebugPrintf("DMA copy: the destination differs from the source\n");
        return 1;
    }
    int8_t *y = output_p;
    for (int r = 0; r < ROWS; r++)
        for (int o = 0; o < OUT; o++) {
            int32_t acc = b[o];
            for (int i = 0; i < IN; i++)
                acc += (x[r * IN + i] - input_zp) * w[o * IN + i];
            int8_t expected = requantize(acc, multiplier, shift, output_zp, -128, 127);
            if (y[r * OUT + o] != expected) {
                NvDlaDebugPrintf("FC output[%d][%d] = %d, expected %d\n", r, o, y[r * OUT + o], expected);
                return 1;
            }
        }
    printf("dma copy %d bytes ok; fully connected %dx%d -> %dx%d ok (output[0][0..3] = %d %d %d %d)\n",
           COPY_BYTES, ROWS, IN, ROWS, OUT, y[0], y[1], y[2], y[3]);

    /* refusals: an empty task, a memory that is not this device's, and a copy from an
     * address the context never mapped (an IOMMU fault on the chip; the device carries on) */
    NvDlaTask empty = { .task_id = 3, .num_addresses = 0 };
    int dummy;
    if (NvDlaSubmit(session, device, &empty, 1) != NvError_BadParameter ||
        NvDlaFreeMem(session, device, &dummy, NULL, 0) != NvError_BadParameter) {
        NvDlaDebugPrintf("a bad task or memory was not refused with NvError_BadParameter\n");
        return 1;
    }
    copy->src = 0x7fff00000000ull;
    NvError fault = NvDlaSubmit(session, device, &tasks[0], 1);
    if (fault != NvError_InvalidAddress) {
        NvDlaDebugPrintf("a copy from an unmapped address gave NvError %d, not InvalidAddress\n", (int)fault);
        return 1;
    }
    copy->src = a_src;
    CHECK(NvDlaSubmit(session, device, &tasks[0], 1));     /* and the device still works */

    CHECK(NvDlaFreeMem(session, device, src, src_p, COPY_BYTES));
    CHECK(NvDlaFreeMem(session, device, dst, dst_p, COPY_BYTES));
    CHECK(NvDlaFreeMem(session, device, fc_cmd, fc_cmd_p, NPU_TASK_FULLY_CONNECTED_SIZE));
    NvDlaClose(session, device);     /* frees the memory still allocated */
    NvDlaDestroy(session);
    printf("ok\n");
    return 0;
}
