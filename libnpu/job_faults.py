"""Which task a failed job failed in: a user queue job's task index from its queue's header,
and the layer of a model it names.  The chip reports the index of the task it refused in the
job's command buffer (``JobError.task_index``); the runtime, which knows the loadable the job
came from, turns it into the loadable's task and the operator and layer it was compiled from,
so a refused descriptor reads ``job failed at task 90 (CONV_2D 'conv1d_7')``.

The index and what it names are the submitting context's own (its queue's header, its own
loadable): nothing of another context's job reaches this error."""
from __future__ import annotations

from libnpu.errors import JobError
from libnpu.loadable import Loadable
from npu_hw import queues

__all__ = ["name_failed_task", "queue_job_error"]


def queue_job_error(header: queues.Header, queue_id: int, seq: int, status: int) -> JobError:
    """The error of job ``seq`` of a user queue (``header``: its memory's) that completed with
    ``status``, naming the task it failed in when the chip recorded it (the header's
    failed_task: ABI 2.9; 0, so None, before)."""
    task = queues.failed_task_of(header.read64(queues.HDR_FAILED_TASK), seq)
    return JobError(-status, "job", f"queue {queue_id} job {seq} failed", task_index=task)


def name_failed_task(error: JobError, loadable: Loadable, first_task: int = 0) -> JobError:
    """``error`` of a job running ``loadable``'s tasks from ``first_task`` (a partition's
    first), with its task index counted in the whole loadable and the task's operator and
    layer named; ``error`` itself when the device did not say which task failed."""
    if error.task_index is None:
        return error
    index = first_task + error.task_index
    if not 0 <= index < len(loadable.tasks):
        return error          # not one of the loadable's (it cannot be, unless the model was changed under the job)
    task = loadable.tasks[index]
    named = JobError(error.errno, error.command, "job failed", task_index=index, task_name=f"{task.op} {task.name!r}")
    named.__traceback__ = error.__traceback__
    return named
