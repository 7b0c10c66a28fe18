/* Every nvdla_port.h call on a device whose driver goes away while the program holds it.
 * Opens device 0 ($NPU_DEVROOT), allocates two memories, prints "ready", waits for a line
 * on stdin (the test stops the driver meanwhile), then calls every function and prints
 * one line per call: "<call> <NvError>". Exits 0 once NvDlaDestroy returned. */
#include <stdio.h>
#include <string.h>

#include "nvdla_port.h"

int main(void)
{
    void *session, *device, *mem[2], *data[2];
    if (NvDlaInitialize(&session) != NvSuccess || NvDlaOpen(session, 0, &device) != NvSuccess)
        return 1;
    for (int i = 0; i < 2; i++)
        if (NvDlaAllocMem(session, device, &mem[i], &data[i], 4096, NvDlaHeap_System) != NvSuccess)
            return 1;
    printf("ready\n");
    fflush(stdout);
    if (getchar() == EOF)
        return 1;
    NvDlaTask task;
    memset(&task, 0, sizeof task);
    task.num_addresses = 2;
    task.address_list[0] = mem[0];
    task.address_list[1] = mem[1];
    printf("NvDlaSubmit %d\n", (int)NvDlaSubmit(session, device, &task, 1));
    void *more, *more_data;
    printf("NvDlaAllocMem %d\n", (int)NvDlaAllocMem(session, device, &more, &more_data, 4096, NvDlaHeap_System));
    NvU64 address;
    printf("NvDlaMemGetAddress %d\n", (int)NvDlaMemGetAddress(mem[1], &address));
    printf("NvDlaFreeMem %d\n", (int)NvDlaFreeMem(session, device, mem[1], data[1], 4096));
    void *other;
    printf("NvDlaOpen %d\n", (int)NvDlaOpen(session, 0, &other));
    NvDlaClose(session, device);
    printf("NvDlaClose 0\n");
    NvDlaDestroy(session);
    printf("NvDlaDestroy 0\n");
    return 0;
}
