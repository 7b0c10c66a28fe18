"""Complex tensors stay inside one host call: the operators reading or writing them run on LiteRT, never on the chip.

TF's ``tf.signal.stft`` exports ``RFFT2D`` (float in, complex64 out) and ``COMPLEX_ABS``
(``REAL`` / ``IMAG`` too) in the graph of every audio model that computes its spectrogram
itself. The chip has no complex arithmetic and the device's buffers (the uapi's dtypes)
no complex type, so a complex tensor is never an IR tensor: it is neither quantized nor
placed, nor passed between partitions. :func:`complex_operators` sends every operator
touching one to the CPU, and :func:`group_keeping_complex_inside` groups the CPU
operators (:mod:`~libnpu.compiler.host_groups`) so that each complex tensor's writer and
readers share one host call: a chip operator on a path between them (which would make
the group wait for the chip and split it) joins the call too. A complex tensor no host
call can hold (a model input or output, or one between operators that must run alone)
is refused with :class:`ComplexTensorError`, naming it and why.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence

from .host_groups import HostGroups, group_host_ops
from .ir import IRError

__all__ = ["ComplexTensorError", "complex_operators", "group_keeping_complex_inside", "describe"]

Deps = Sequence[tuple[Sequence[Hashable], Sequence[Hashable]]]


class ComplexTensorError(IRError):
    """A complex tensor no host call can keep inside (a model input or output, or between
    operators that run alone)."""


def describe(index: int, dtype: str, name: str) -> str:
    """``complex64 tensor 50 ('FFT')``: TF's converter joins fused names with ';' (hundreds of
    characters), of which the first part names the tensor."""
    short = name.split(";")[0]
    return f"{dtype} tensor {index} ({short if len(short) <= 60 else short[:57] + '...'!r})"


def complex_operators(deps: Deps, complex_: Mapping[int, str]) -> dict[int, str]:
    """Operator index -> its reason for the CPU, for every operator reading or writing a
    tensor of ``complex_`` (tensor index -> :func:`describe` text)."""
    reasons: dict[int, str] = {}
    for k, (ins, outs) in enumerate(deps):
        touched = [t for t in (*outs, *ins) if t in complex_]
        if touched:
            reasons[k] = f"{complex_[touched[0]]}: the chip has no complex type"   # type: ignore[index]
    return reasons


def group_keeping_complex_inside(deps: Deps, host: Collection[int], complex_: Mapping[int, str],
                                 alone: Callable[[int], bool] = lambda i: False) -> tuple[HostGroups, dict[int, str]]:
    """:func:`~libnpu.compiler.host_groups.group_host_ops` of ``deps`` (each operator's
    ``(inputs, outputs)``) for the CPU operators ``host`` (every operator touching a tensor
    of ``complex_`` among them), with the operators it had to add so that each complex
    tensor's writer and readers share a group: operator index -> reason.

    A reader lands in another group than the writer only when a path leads from the
    writer's group to it through an operator outside the group; the chip operators on such
    paths join the CPU ones until none is left (each round adds at least one)."""
    producer = {t: k for k, (_, outs) in enumerate(deps) for t in outs}
    readers: dict[Hashable, list[int]] = {}
    for k, (ins, _) in enumerate(deps):
        for t in dict.fromkeys(ins):
            readers.setdefault(t, []).append(k)
    added: dict[int, str] = {}
    chosen = set(host)
    while True:
        groups = group_host_ops(deps, chosen, alone)
        crossing = _first_crossing(groups, producer, readers, complex_)
        if crossing is None:
            return groups, added
        tensor, reader = crossing
        writers = [k for k, g in groups.group.items() if g == groups.group[producer[tensor]]]
        between = (_downstream(writers, deps, readers) & _upstream(reader, deps, producer)) - chosen
        if not between:
            raise ComplexTensorError(f"{complex_[tensor]} would pass between two host calls (operator "
                                     f"{producer[tensor]} writes it; operator {reader}, which reads it, cannot join "
                                     "that call): the device's buffers have no complex type")
        reason = f"on a path between the writer and a reader of {complex_[tensor]}, which one host call keeps inside"
        added.update(dict.fromkeys(sorted(between), reason))
        chosen |= between


def _first_crossing(groups: HostGroups, producer: Mapping[Hashable, int], readers: Mapping[Hashable, list[int]],
                    complex_: Mapping[int, str]) -> tuple[int, int] | None:
    """The first complex tensor (and a reader of it) whose reader is in another group than its writer."""
    for t in complex_:
        if t not in producer:
            continue        # a constant: each host call reading it carries its own copy
        home = groups.group.get(producer[t])
        for k in readers.get(t, []):
            if groups.group.get(k) != home:
                return t, k
    return None


def _downstream(starts: Sequence[int], deps: Deps, readers: Mapping[Hashable, list[int]]) -> set[int]:
    """The operators reached from ``starts`` (not counting them)."""
    seen: set[int] = set()
    pending = [r for k in starts for t in deps[k][1] for r in readers.get(t, [])]
    while pending:
        k = pending.pop()
        if k not in seen:
            seen.add(k)
            pending += [r for t in deps[k][1] for r in readers.get(t, [])]
    return seen - set(starts)


def _upstream(start: int, deps: Deps, producer: Mapping[Hashable, int]) -> set[int]:
    """The operators ``start`` depends on (not counting it)."""
    seen: set[int] = set()
    pending = [producer[t] for t in deps[start][0] if t in producer]
    while pending:
        k = pending.pop()
        if k not in seen:
            seen.add(k)
            pending += [producer[t] for t in deps[k][0] if t in producer]
    return seen
