"""One client process of ``benchmarks.hinted_wait``: synchronous inferences in blocks, on command.

Run as a script (``python benchmarks/wait_worker.py DEVROOT MODEL...``) with the checkout it
measures first on PYTHONPATH, so that ``libnpu`` and its C queue client are that checkout's:
it imports nothing of ``benchmarks``. It loads each model on the device under DEVROOT, warms
a request of each up (its first inferences take a user queue and start the wait's hint),
prints one JSON line ``{"pid": ...}``, then answers each line ``INDEX COUNT`` on stdin with
one JSON line: the wall seconds of COUNT ``infer`` calls of model INDEX, this thread's CPU
seconds over them and how the request queue's waits ended meanwhile (``at_once``, ``spun``,
``slept``). An empty line or end of input ends it.
"""
from __future__ import annotations

import json
import os
import sys
import time

import libnpu
from libnpu.tools.run import random_inputs

WARM_UP = 30


def _waits(request: libnpu.InferRequest) -> dict[str, int]:
    job = getattr(request, "_job", None)
    queue = job.queue if job is not None else None
    return queue.wait_counts() if queue is not None else {"at_once": 0, "spun": 0, "slept": 0}


def main(argv: list[str]) -> int:
    devroot, paths = argv[0], argv[1:]
    models = [libnpu.load(path, devroot=devroot) for path in paths]
    requests = [model.create_request() for model in models]
    inputs = [random_inputs(model.inputs, seed=1) for model in models]
    for request, x in zip(requests, inputs):
        for _ in range(WARM_UP):
            request.infer(x)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    clock = time.perf_counter
    for line in sys.stdin:
        if not line.strip():
            break
        index, count = (int(word) for word in line.split())
        request, x = requests[index], inputs[index]
        waits, cpu = _waits(request), time.thread_time()
        wall = []
        for _ in range(count):
            started = clock()
            request.infer(x)
            wall.append(clock() - started)
        cpu = time.thread_time() - cpu
        after = _waits(request)
        print(json.dumps({"wall": wall, "cpu_s": cpu, "waits": {k: after[k] - waits[k] for k in after}}), flush=True)
    for request in requests:
        request.release()
    for model in models:
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
