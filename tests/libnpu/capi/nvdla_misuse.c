/* nvdla_misuse: a C program misusing libnvdla_port.so the ways a buggy or hostile caller
 * does (tests/libnpu/capi/test_nvdla_misuse.py runs each attack in a process of its own).
 * Every call must answer with an NvError, never crash, hang or touch memory it was not
 * given. Prints "ok" and exits 0 when the library held; a message and 1 otherwise.
 * Usage: nvdla_misuse forged|freed|racing_close   (NPU_DEVROOT: the device's devroot)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "npu_tasks.h"
#include "nvdla_port.h"

#define EXPECT(call, want)                                                                  \
    do {                                                                                    \
        NvError got_ = (call);                                                              \
        if (got_ != (want)) {                                                               \
            printf("%s gave NvError %d, expected %d\n", #call, (int)got_, (int)(want));     \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

/* An address no object lives at: a page mapped, then unmapped (reading it faults). */
static void *unmapped_page(void)
{
    void *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(page, 4096);
    return page;
}

static int forged(void)
{
    void *bogus = unmapped_page(), *out = NULL, *data = NULL, *session = NULL, *device = NULL;
    NvU64 address = 0;
    NvDlaTask task = { .num_addresses = 1, .address_list = { bogus } };
    EXPECT(NvDlaOpen(bogus, 0, &out), NvError_BadParameter);
    EXPECT(NvDlaAllocMem(bogus, bogus, &out, &data, 64, NvDlaHeap_System), NvError_BadParameter);
    EXPECT(NvDlaFreeMem(bogus, bogus, bogus, NULL, 0), NvError_BadParameter);
    EXPECT(NvDlaSubmit(bogus, bogus, &task, 1), NvError_BadParameter);
    EXPECT(NvDlaMemGetAddress(bogus, &address), NvError_BadParameter);
    NvDlaClose(bogus, bogus);
    NvDlaDestroy(bogus);
    /* a live session with a forged device, memory and task address */
    EXPECT(NvDlaInitialize(&session), NvSuccess);
    EXPECT(NvDlaOpen(session, 0, &device), NvSuccess);
    EXPECT(NvDlaAllocMem(session, bogus, &out, &data, 64, NvDlaHeap_System), NvError_BadParameter);
    EXPECT(NvDlaFreeMem(session, device, bogus, NULL, 0), NvError_BadParameter);
    EXPECT(NvDlaSubmit(session, device, &task, 1), NvError_BadParameter);
    NvDlaClose(session, bogus);
    NvDlaDestroy(session);
    return 0;
}

static int freed(void)
{
    void *session = NULL, *device = NULL, *other = NULL, *memory = NULL, *data = NULL, *out = NULL;
    NvU64 address = 0;
    EXPECT(NvDlaInitialize(&session), NvSuccess);
    EXPECT(NvDlaOpen(session, 0, &device), NvSuccess);
    EXPECT(NvDlaAllocMem(session, device, &memory, &data, 4096, NvDlaHeap_System), NvSuccess);
    EXPECT(NvDlaFreeMem(session, device, memory, data, 4096), NvSuccess);
    EXPECT(NvDlaMemGetAddress(memory, &address), NvError_BadParameter);        /* freed memory */
    EXPECT(NvDlaFreeMem(session, device, memory, data, 4096), NvError_BadParameter);   /* double free */
    EXPECT(NvDlaAllocMem(session, device, &memory, &data, 4096, NvDlaHeap_System), NvSuccess);
    NvDlaClose(session, device);                       /* frees the memory still allocated */
    EXPECT(NvDlaMemGetAddress(memory, &address), NvError_BadParameter);        /* freed with its device */
    EXPECT(NvDlaAllocMem(session, device, &out, &data, 64, NvDlaHeap_System), NvError_BadParameter);
    NvDlaClose(session, device);                       /* closed twice */
    EXPECT(NvDlaOpen(session, 0, &other), NvSuccess);
    EXPECT(NvDlaAllocMem(session, other, &memory, &data, 4096, NvDlaHeap_System), NvSuccess);
    NvDlaDestroy(session);                             /* closes the device, frees its memory */
    EXPECT(NvDlaMemGetAddress(memory, &address), NvError_BadParameter);
    EXPECT(NvDlaOpen(session, 0, &out), NvError_BadParameter);                 /* destroyed session */
    EXPECT(NvDlaAllocMem(session, other, &out, &data, 64, NvDlaHeap_System), NvError_BadParameter);
    NvDlaDestroy(session);                             /* destroyed twice */
    return 0;
}

/* ---- racing_close: calls on a device while another thread closes it or destroys its session ---- */

#define RACERS 4
#define ROUNDS 30                          /* 100 took 40 s of the suite's 10 minutes */

struct race {
    void *session, *device;
    NvDlaTask copy;                    /* a DMA copy inside one memory, written before the race */
    atomic_int started;                /* racers that made at least one call */
    atomic_int unexpected;             /* an answer other than success or BadParameter */
};

/* Allocates, submits and frees until the device is gone. It never touches a mapping:
 * closing the device unmaps its memory, as the header says, whatever another thread holds. */
static void *racer(void *arg)
{
    struct race *race = arg;
    int announced = 0;
    for (;;) {
        void *memory = NULL, *data = NULL;
        NvU64 address = 0;
        NvError a = NvDlaAllocMem(race->session, race->device, &memory, &data, 4096, NvDlaHeap_System);
        NvError g = a == NvSuccess ? NvDlaMemGetAddress(memory, &address) : NvError_BadParameter;
        NvError s = NvDlaSubmit(race->session, race->device, &race->copy, 1);
        NvError f = a == NvSuccess ? NvDlaFreeMem(race->session, race->device, memory, data, 4096)
                                   : NvError_BadParameter;
        NvError answers[] = { a, g, s, f };
        for (int i = 0; i < 4; i++)
            if (answers[i] != NvSuccess && answers[i] != NvError_BadParameter)
                atomic_fetch_add(&race->unexpected, 1);
        if (!announced) {
            announced = 1;
            atomic_fetch_add(&race->started, 1);
        }
        if (a == NvError_BadParameter && s == NvError_BadParameter)
            return NULL;               /* the device is gone: every later call says so */
    }
}

static int racing_close(void)
{
    for (int round = 0; round < ROUNDS; round++) {
        struct race race = { 0 };
        EXPECT(NvDlaInitialize(&race.session), NvSuccess);
        EXPECT(NvDlaOpen(race.session, 0, &race.device), NvSuccess);
        void *command = NULL, *data = NULL;
        NvU64 address = 0;
        EXPECT(NvDlaAllocMem(race.session, race.device, &command, &data, 4096, NvDlaHeap_System), NvSuccess);
        EXPECT(NvDlaMemGetAddress(command, &address), NvSuccess);
        *(struct npu_task_dma_copy *)data = (struct npu_task_dma_copy){
            .opcode = NPU_OP_DMA_COPY, .size = NPU_TASK_DMA_COPY_SIZE,
            .src = address + 2048, .dst = address + 3072, .length = 64 };
        race.copy = (NvDlaTask){ .task_id = 1, .num_addresses = 1, .command_size = NPU_TASK_DMA_COPY_SIZE,
                                 .address_list = { command } };
        pthread_t threads[RACERS];
        for (int i = 0; i < RACERS; i++)
            pthread_create(&threads[i], NULL, racer, &race);
        while (atomic_load(&race.started) < RACERS)
            sched_yield();
        if (round % 2 == 0) {
            NvDlaClose(race.session, race.device);
            for (int i = 0; i < RACERS; i++)
                pthread_join(threads[i], NULL);
            NvDlaDestroy(race.session);
        } else {
            NvDlaDestroy(race.session);      /* closes the device under the racers */
            for (int i = 0; i < RACERS; i++)
                pthread_join(threads[i], NULL);
        }
        if (atomic_load(&race.unexpected) != 0) {
            printf("round %d: %d calls answered neither success nor BadParameter\n", round,
                   atomic_load(&race.unexpected));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *attack = argc > 1 ? argv[1] : "";
    int failed;
    if (strcmp(attack, "forged") == 0)
        failed = forged();
    else if (strcmp(attack, "freed") == 0)
        failed = freed();
    else if (strcmp(attack, "racing_close") == 0)
        failed = racing_close();
    else {
        printf("unknown attack %s\n", attack);
        return 2;
    }
    if (!failed)
        printf("ok\n");
    return failed;
}
