"""Names the layer a model's job failed in: the chip reports the index of the task it refused
in the job's command buffer (``JobError.task_index``); the runtime, which knows the loadable
the job came from, turns it into the loadable's task and the operator and layer it was
compiled from, so a refused descriptor reads ``job failed at task 90 (CONV_2D 'conv1d_7')``.

The index and what it names are the submitting context's own (its queue's header, its own
loadable): nothing of another context's job reaches this error."""
from __future__ import annotations

from libnpu.errors import JobError
from libnpu.loadable import Loadable

__all__ = ["name_failed_task"]


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
