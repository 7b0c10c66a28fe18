/* Allocations through libnvdla_port with pauses longer than the driver keeps an idle
 * hand-over connection (NPU_HANDOVER_IDLE_S in the daemon's environment): each one after
 * a pause must reconnect transparently. Prints "ok" and exits 0 on success. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nvdla_port.h"

int main(void)
{
    void *session, *device, *mem[4], *data[4];
    if (NvDlaInitialize(&session) != NvSuccess || NvDlaOpen(session, 0, &device) != NvSuccess)
        return 1;
    for (int i = 0; i < 4; i++) {
        if (i)
            usleep(800 * 1000);
        NvError e = NvDlaAllocMem(session, device, &mem[i], &data[i], 4096, NvDlaHeap_System);
        if (e != NvSuccess) {
            printf("allocation %d after a pause: NvError %d\n", i, (int)e);
            return 1;
        }
        memset(data[i], i + 1, 4096);
    }
    NvDlaDestroy(session);            /* closes the device, frees the memories */
    printf("ok\n");
    return 0;
}
