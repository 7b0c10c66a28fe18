"""State kept between calls: TFLite resource variables (VAR_HANDLE, READ_VARIABLE,
ASSIGN_VARIABLE, and CALL_ONCE running the init subgraph that gives them their first
values).

None of them becomes an IR op. The import resolves them into the graph's structure, in
the order TFLite runs them, as a straight-line program: each variable is an
:class:`~libnpu.compiler.ir.State` whose ``input`` is the tensor the first READ_VARIABLE
of a call yields; a READ_VARIABLE after an ASSIGN_VARIABLE in the same call yields the
assigned tensor itself; the last assigned tensor is the state's ``output``, left in the
variable for the next call. TFLite copies a variable's bytes on read and assign, so a
read may only stand for a tensor of the same type and quantization (anything else is
refused by name).

On the chip a state lives in a region of its own (per inference request); the graph reads
it in place, and one ASSIGN_VARIABLE task at the end of the job copies the new value in
(the RESHAPE descriptor: a byte copy), after every task that reads the old one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tflite

from .. import tflite_import
from ..ir import Op, State
from ..registry import Operator, register
from ..tflite_import import TFLiteImportError
from ..tflite_strings import flatbuffer_text


class VariableError(TFLiteImportError):
    """Resource variables used in a way the compiler cannot carry. Not an
    ``UnsupportedOpError``: a variable's state belongs to the request, so its operators
    can never be handed to another runtime operator by operator."""


@dataclass
class _Variables:
    """One import's variables: which handle tensor names which variable, and their states."""
    handles: dict[int, str] = field(default_factory=dict)       # handle tensor -> variable name
    states: dict[str, State] = field(default_factory=dict)
    current: dict[str, str] = field(default_factory=dict)       # variable -> tensor holding it now
    initial: dict[str, bytes] = field(default_factory=dict)     # from CALL_ONCE's init subgraph


def _variables(im) -> _Variables:
    return im.extensions.setdefault("variables", _Variables())


def _variable_name(table: Any) -> str:
    o = tflite_import.options(table, tflite.VarHandleOptions)
    if o is None or not o.SharedName():
        raise VariableError("VAR_HANDLE without a shared name")
    container = flatbuffer_text(o.Container())
    name = flatbuffer_text(o.SharedName())
    return f"{container}/{name}" if container else name


def _handle(im, ins, outs, table, where):
    try:
        _variables(im).handles[outs[0]] = _variable_name(table)
    except VariableError as exc:
        raise VariableError(f"{where}: {exc}") from None


def _variable_of(im, handle: int, where: str) -> str:
    name = _variables(im).handles.get(handle)
    if name is None:
        raise VariableError(f"{where}: its resource was not made by a VAR_HANDLE of this subgraph")
    return name


def _state(im, variable: str, like: str, where: str, *, own: bool) -> State:
    """The variable's state, declared on first use with ``like``'s type and shape
    (``own``: ``like`` itself becomes the state's tensor)."""
    v, g = _variables(im), im.graph
    if variable in v.states:
        return v.states[variable]
    spec = g.tensors[like]
    state_tensor = like
    if not own:
        state_tensor = g.unique_name(variable)
        g.add_tensor(type(spec)(state_tensor, spec.shape, spec.dtype, spec.quant))
    state = State(variable, state_tensor, state_tensor, _initial(v.initial.get(variable), spec, variable, where))
    g.states.append(state)
    v.states[variable] = state
    return state


def _initial(raw: bytes | None, spec, variable: str, where: str) -> np.ndarray:
    if raw is None:
        return np.zeros(spec.shape, spec.dtype)
    if len(raw) != spec.nbytes:
        raise VariableError(f"{where}: variable {variable!r} is initialized with {len(raw)} bytes "
                            f"but used as {spec.shape} {spec.dtype}")
    return np.frombuffer(raw, spec.dtype).reshape(spec.shape).copy()


def _same_value(g, a: str, b: str) -> bool:
    ta, tb = g.tensors[a], g.tensors[b]
    return (ta.shape, ta.dtype, ta.quant) == (tb.shape, tb.dtype, tb.quant)


def _read(im, ins, outs, table, where):
    v, g = _variables(im), im.graph
    variable = _variable_of(im, ins[0], where)
    out = im.tensor(outs[0])
    # A graph output needs bytes of its own: the state changes at the end of the call.
    is_output = outs[0] in {int(i) for i in im.sg.OutputsAsNumpy()}
    if variable not in v.current:           # the first read of this call: the state itself
        if variable not in v.initial:
            raise VariableError(f"{where}: variable {variable!r} is read before any value is assigned "
                                "(no CALL_ONCE init subgraph assigns it)")
        v.current[variable] = _state(im, variable, out, where, own=not is_output).input
    value = v.current[variable]
    if value == out:
        return
    if not _same_value(g, value, out):
        raise VariableError(f"{where}: reads variable {variable!r} as {g.tensors[out].shape} "
                            f"{g.tensors[out].dtype} with other quantization than its value {value!r}")
    if is_output:
        g.add_op(Op("RESHAPE", [value], [out], dict(new_shape=g.tensors[out].shape), name=out))
    else:
        im.names[outs[0]] = value
        del g.tensors[out]


def _assign(im, ins, outs, table, where):
    v, g = _variables(im), im.graph
    variable = _variable_of(im, ins[0], where)
    value = im.tensor(ins[1])
    state = _state(im, variable, value, where, own=False)
    spec, state_spec = g.tensors[value], g.tensors[state.input]
    if (spec.shape, spec.dtype) != (state_spec.shape, state_spec.dtype):
        raise VariableError(f"{where}: assigns {spec.shape} {spec.dtype} to variable {variable!r} "
                            f"of {state_spec.shape} {state_spec.dtype}")
    v.current[variable] = state.output = value


def _call_once(im, ins, outs, table, where):
    """Run the init subgraph at import: it may only assign constants to variables."""
    o = tflite_import.options(table, tflite.CallOnceOptions)
    index = int(o.InitSubgraphIndex()) if o is not None else -1
    if not 0 < index < im.model.SubgraphsLength():
        raise VariableError(f"{where}: init subgraph {index} does not exist")
    sg, v = im.model.Subgraphs(index), _variables(im)
    handles: dict[int, str] = {}
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        name = tflite_import.builtin_name(im.model, op.OpcodeIndex())
        ins_i = [int(j) for j in op.InputsAsNumpy()] if op.InputsLength() else []
        if name == "VAR_HANDLE":
            handles[int(op.OutputsAsNumpy()[0])] = _variable_name(op.BuiltinOptions())
        elif name == "ASSIGN_VARIABLE" and ins_i and ins_i[0] in handles:
            raw = im._buffer_data(sg.Tensors(ins_i[1]).Buffer())
            if raw is None:
                raise VariableError(f"{where}: init subgraph {index} assigns a computed value to "
                                    f"{handles[ins_i[0]]!r}; only constants are supported")
            variable = handles[ins_i[0]]
            v.initial[variable] = raw.tobytes()
            if variable in v.states:        # declared before CALL_ONCE ran: give it the value now
                state = v.states[variable]
                state.initial = _initial(v.initial[variable], im.graph.tensors[state.input], variable, where)
        else:
            raise VariableError(f"{where}: init subgraph {index} runs {name}; only constant "
                                "assignments to variables (VAR_HANDLE, ASSIGN_VARIABLE) are supported")


def _lower_assign(low, op, p):
    """The write-back of a state: ``op.inputs[0]`` (the new value) into its state region."""
    return low.emit("RESHAPE", op, dict(count=low.g.tensors[op.inputs[0]].nbytes))


for _name, _handler in (("VAR_HANDLE", _handle), ("READ_VARIABLE", _read), ("CALL_ONCE", _call_once)):
    register(Operator(_name, tflite=_handler, graph_op=False))
register(Operator("ASSIGN_VARIABLE", tflite=_assign, graph_op=False, params=lambda g, op: {}, lower=_lower_assign))
