"""An ONNX backend (``onnx.backend.base.Backend``): MatMul and Pow on numba_onnx_ops, every other
operator on onnx's reference implementation.

>>> from numba_onnx_ops.backend import Backend
>>> rep = Backend.prepare(model)                 # doctest: +SKIP
>>> (y,) = rep.run([x])                          # doctest: +SKIP
>>> rep.placement()                              # doctest: +SKIP
[Placement(node='fc1', op_type='MatMul', runtime='numba_onnx_ops'),
 Placement(node='act', op_type='Relu', runtime='onnx.reference'), ...]
>>> (z,) = Backend.run_node(node, [x, y], opset_version=13)  # doctest: +SKIP

Which node runs where
---------------------
MatMul and Pow of the default ONNX domain run on :func:`numba_onnx_ops.matmul` and
:func:`numba_onnx_ops.pow`. Every other node runs on the class ``onnx.reference`` implements its
operator with, built exactly as ``onnx.reference.ReferenceEvaluator`` builds it: any model that
evaluator runs, this backend runs, with the same results but for MatMul's and Pow's own (MatMul
may sum in another order, Pow is within 1 ulp). That covers initializers, Constant nodes, omitted
optional inputs and outputs (empty names), operators defined as functions, the ``ai.onnx.ml`` and
preview domains, functions the model defines, and If, Loop and Scan, whose subgraphs run in onnx's
evaluator with MatMul and Pow again on numba_onnx_ops. One difference on purpose: onnx's
evaluator files an unnamed optional output under the name ``""``, where a later omitted optional
input reads it; here an omitted input is always absent.

:meth:`BackendRep.placement` tells, for each node of the model's graph, which of the two runs it:
``"numba_onnx_ops"`` or ``"onnx.reference"``.

Errors
------
Raised by :meth:`Backend.prepare`, before anything runs: a ``NotImplementedError`` naming the
operator, its domain and the node for an operator neither can run (an unknown operator, another
domain without a function the model defines); a ``ValueError`` for a MatMul or Pow node the
version does not define (:func:`check_node`). Raised by :meth:`BackendRep.run`: a ``TypeError``
or ``ValueError`` naming the node and the opset, e.g. for a dtype the version does not allow.

Versions
--------
Every operator's version follows the opset the model imports for its domain
(``opset_version=`` for :meth:`Backend.run_node`; without it the newest). MatMul and Pow resolve
theirs exactly as :func:`numba_onnx_ops.resolve_version` does, and Pow-1's ``broadcast`` and
``axis`` attributes are read from the node.

Running
-------
:meth:`Backend.prepare` resolves every node once (version, attributes, the function to call) and
lays the graph out as a list of steps over numbered value slots; an intermediate value is dropped
once its last consumer has run. Constant nodes are evaluated once, when the model is prepared.
For the usual call of :meth:`BackendRep.run` (a list or tuple of numpy arrays of the declared
dtypes) and a graph without If, Loop or Scan, it also writes those steps out as one Python
function, each value a local variable and each node one call, which does nothing per node but
the call itself (other inputs take the general loop over the steps).

With a ``dask.array.Array`` among the inputs, MatMul and Pow stay lazy (checked when ``run`` is
called, nothing computed), so a model made of them returns lazy dask arrays. onnx's reference
classes take numpy arrays only: a node they run computes its dask inputs first.

This module needs the optional ``onnx`` package (``pip install 'numba_onnx_ops[onnx]'``);
``import numba_onnx_ops`` never imports it.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

import numba_onnx_ops as _api

from ..core.checks import dask_operand

# First: without onnx this raises the ImportError that names the extra to install.
from .onnx_evaluator import (
    DEFAULT_DOMAINS,
    SUPPORTED_OPS,
    ReferenceEvaluator,
    check_node,
    describe,
    is_ours,
    node_error,
    qualified_op,
)

# isort: split
import onnx
import onnx.backend.base as _base
from onnx import helper, numpy_helper
from onnx.reference.op_run import OpRun, RuntimeContextError

__all__ = [
    "SUPPORTED_OPS",
    "Backend",
    "BackendRep",
    "Placement",
    "check_node",
    "default_opset",
]

#: :attr:`Placement.runtime` of a node that runs on numba_onnx_ops' kernels.
NUMBA_ONNX_OPS = "numba_onnx_ops"
#: :attr:`Placement.runtime` of a node that runs on onnx's reference implementation.
ONNX_REFERENCE = "onnx.reference"

# Value slots every graph has: an omitted optional input reads slot 0, which always holds None;
# the outputs a node leaves unnamed are written to slot 1, which nothing reads.
_NONE_SLOT = 0
_UNNAMED_SLOT = 1


def default_opset(model: onnx.ModelProto) -> int:
    """Return the default-domain opset that ``model`` imports.

    Raises
    ------
    ValueError
        If the model imports no default-domain opset.
    """
    for entry in model.opset_import:
        if entry.domain in DEFAULT_DOMAINS:
            return int(entry.version)
    raise ValueError("the model imports no opset of the default ONNX domain ('' or 'ai.onnx')")


def _model_opset(model: onnx.ModelProto) -> int | None:
    """:func:`default_opset`, or None for a model without default-domain nodes that imports none
    (e.g. one of ``ai.onnx.ml`` operators only)."""
    try:
        return default_opset(model)
    except ValueError:
        if any(node.domain in DEFAULT_DOMAINS for node in model.graph.node):
            raise
        return None


def _kernel(node: onnx.NodeProto, opset: int | None) -> Callable[..., np.ndarray]:
    """Check ``node`` and bind it to the public function it runs, with its opset and attributes."""
    version = check_node(node, opset)
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "MatMul":
        return functools.partial(_api.matmul, opset=opset)
    # Only Pow-1 has attributes; check_node refused them at later versions.
    if version == 1:
        return functools.partial(
            _api.pow,
            opset=opset,
            broadcast=attributes.get("broadcast"),
            axis=attributes.get("axis"),
        )
    return functools.partial(_api.pow, opset=opset)


class _Evaluator(ReferenceEvaluator):
    """:class:`ReferenceEvaluator` (MatMul and Pow on numba_onnx_ops everywhere, function bodies
    included) with a clear error for an operator it cannot run."""

    def _load_impl(self, node: onnx.NodeProto, input_types: Any = None) -> Any:
        # The evaluator looks every node's class up here (its own graph's, its subgraphs' and
        # functions'), so this is the one place that knows which node had none. Should a later
        # onnx stop calling it, the evaluator's own error is raised instead, still at prepare.
        try:
            return super()._load_impl(node, input_types)
        except RuntimeContextError:
            raise  # the evaluator retries with the input types
        except (NotImplementedError, RuntimeError, ValueError) as error:
            if node.domain in self.opsets:
                at = f"at {node.domain or 'default-domain'} opset {self.opsets[node.domain]}"
            else:
                at = f"and the model imports no opset of domain {node.domain!r}"
            raise NotImplementedError(
                f"no implementation of operator {qualified_op(node)!r} ({describe(node)}): "
                f"numba_onnx_ops runs only {', '.join(SUPPORTED_OPS)} from the default ONNX "
                f"domain, and onnx's reference evaluator has none {at}"
            ) from error


def _reference_nodes(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto]) -> list[OpRun]:
    """onnx's reference op instances for ``nodes`` of ``model``'s graph, built by its evaluator.

    The evaluator sees the graph's inputs, outputs and value_info (which decide the function
    bodies of context-dependent operators) but not the initializers, which it would convert again.
    """
    graph = model.graph
    reduced = helper.make_graph(
        nodes, graph.name, graph.input, graph.output, value_info=graph.value_info
    )
    opsets = {entry.domain: int(entry.version) for entry in model.opset_import}
    return _Evaluator(reduced, opsets=opsets, functions=list(model.functions)).rt_nodes_


def _resolve(model: onnx.ModelProto, opset: int) -> list[Callable[..., Any] | OpRun]:
    """For each node of ``model``'s graph, the kernel (ours) or the onnx op instance it runs on.

    Raises check_node's errors for a malformed MatMul or Pow first, then NotImplementedError for
    an operator neither numba_onnx_ops nor onnx's reference evaluator implements.
    """
    nodes = model.graph.node
    resolved: list[Any] = [_kernel(node, opset) if is_ours(node) else None for node in nodes]
    others = [node for node, runner in zip(nodes, resolved) if runner is None]
    if others:
        instances = iter(_reference_nodes(model, others))
        resolved = [next(instances) if runner is None else runner for runner in resolved]
    return resolved


def _subgraph_names(node: onnx.NodeProto) -> set[str]:
    """The value names the subgraphs of ``node`` (and theirs, recursively) read."""
    names: set[str] = set()
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs
        for graph in graphs:
            names.update(output.name for output in graph.output)
            for inner in graph.node:
                names.update(inner.input)
                names.update(_subgraph_names(inner))
    return names


def _gather(slots: tuple[int, ...]) -> Callable[[list[Any]], Sequence[Any]]:
    """A function taking the list of values to those at ``slots``, in order (a tuple, or a list
    for fewer than two slots: ``itemgetter`` of one index would return the bare value)."""
    if len(slots) >= 2:
        return operator.itemgetter(*slots)
    start = slots[0] if slots else 0
    return operator.itemgetter(slice(start, start + len(slots)))


_NOT_PLAIN = object()  # what ``_straight_line``'s function returns for other inputs


def _straight_line(steps, dead, initial, positional, output_slots, outputs, node_error):
    """``BackendRep.run`` as a function written for this graph, for the usual inputs (those
    ``_plain_arrays`` accepts; for others it returns ``_NOT_PLAIN``): each value slot a local
    variable, each step one call.  The same calls, in the same order, dropping each value where
    the general loop does, and the same errors; without that loop's work per node (reading the
    step, gathering the inputs from a list, writing the outputs back), a tenth of a small
    model's run.  Steps with a context (If, Loop, Scan) are not written so; their graphs keep
    the loop."""

    def var(slot: int) -> str:
        return "None" if slot == _NONE_SLOT else f"v{slot}"

    names: dict[str, Any] = {
        "outputs": outputs,
        "new": tuple.__new__,  # (what a named tuple's own constructor calls)
        "node_error": node_error,
        "nodes": [],
        "ndarray": np.ndarray,
        "NOT_PLAIN": _NOT_PLAIN,
    }
    head = [
        "    if inputs.__class__ is not list and inputs.__class__ is not tuple:",
        "        return NOT_PLAIN",
        f"    if len(inputs) != {len(positional)}:",
        "        return NOT_PLAIN",
    ]
    for slot, value in enumerate(initial):
        if slot not in (_NONE_SLOT, _UNNAMED_SLOT):
            names[f"i{slot}"] = value
            head.append(f"    v{slot} = i{slot}")
    if positional:
        head.append(f"    {''.join(f'{var(slot)}, ' for slot, _ in positional)}= inputs")
    for slot, expected in positional:
        names[f"d{slot}"] = expected
        v, d = var(slot), f"d{slot}"
        dtype = "" if expected is None else f" or not ({v}.dtype is {d} or {v}.dtype == {d})"
        head.append(f"    if {v}.__class__ is not ndarray{dtype}:")
        head.append("        return NOT_PLAIN")
    body = []
    for index, ((call, inputs, made, _, node), gone) in enumerate(zip(steps, dead)):
        names["nodes"].append(node)
        args = ", ".join(var(slot) for slot in inputs)
        if (
            isinstance(call, functools.partial)
            and not call.args
            and all(key.isidentifier() for key in call.keywords)
        ):
            # (keywords in the call itself: a partial's merge them into a new dict each call)
            names[f"c{index}"] = call.func
            for key, value in call.keywords.items():
                names[f"k{index}_{key}"] = value
                args += f", {key}=k{index}_{key}"
        else:
            names[f"c{index}"] = call
        body.append(f"        at = {index}")
        if made.__class__ is int:
            target = var(made) if made not in (_NONE_SLOT, _UNNAMED_SLOT) else "_"
            body.append(f"        {target} = c{index}({args})")
        else:  # (as ``zip(outputs, result)``: the outputs the call returns)
            body.append(f"        r = c{index}({args})")
            for i, slot in enumerate(made):
                if slot not in (_NONE_SLOT, _UNNAMED_SLOT):
                    body.append(f"        if len(r) > {i}: {var(slot)} = r[{i}]")
        for slot in gone:
            if slot not in (_NONE_SLOT, _UNNAMED_SLOT):
                body.append(f"        {var(slot)} = None")
    results = "".join(f"{var(slot)}, " for slot in output_slots)
    source = "\n".join(
        [
            "def run(inputs):",
            *head,
            "    at = -1",
            "    try:",
            *body,
            "        pass",
            "    except (TypeError, ValueError) as error:",
            "        raise node_error(nodes[at], error) from error",
            f"    return new(outputs, ({results}))",
        ]
    )
    exec(compile(source, "<numba_onnx_ops model>", "exec"), names)  # noqa: S102 - our own code
    return names["run"]


def _computing_dask(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` with its dask array arguments (and context values) computed first: onnx's
    reference classes take numpy arrays only."""

    def compute(value: Any) -> Any:
        return np.asarray(value) if dask_operand(value) else value

    @functools.wraps(run)
    def call(*args: Any, context: dict[str, Any] | None = None) -> Any:
        args = tuple(compute(arg) for arg in args)
        if context is None:
            return run(*args)
        return run(*args, context={name: compute(value) for name, value in context.items()})

    return call


class Placement(NamedTuple):
    """Where one node of a prepared model runs (see :meth:`BackendRep.placement`)."""

    #: The node's name; a node without one is named after its operator and its position in
    #: the graph's node list, as ``"MatMul#3"``.
    node: str
    #: Its operator: ``"MatMul"``, or ``"domain::op_type"`` outside the default domain.
    op_type: str
    #: ``"numba_onnx_ops"`` or ``"onnx.reference"``.
    runtime: str


def _tensor_dtype(value_info: onnx.ValueInfoProto) -> np.dtype | None:
    """The numpy dtype a graph input declares, or None if it declares no tensor element type."""
    if not value_info.type.HasField("tensor_type"):
        return None
    elem_type = value_info.type.tensor_type.elem_type
    if elem_type == onnx.TensorProto.UNDEFINED:
        return None
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


class BackendRep(_base.BackendRep):
    """A model resolved node by node, ready to run repeatedly.

    Made by :meth:`Backend.prepare`; not meant to be constructed directly.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        if len(graph.sparse_initializer):
            raise NotImplementedError("numba_onnx_ops does not support sparse initializers")
        #: The default-domain opset of the model (None for a model of other domains only).
        self.opset: int | None = _model_opset(model)
        # The opset of each domain the model imports, for error messages.
        self._opsets = {entry.domain: int(entry.version) for entry in model.opset_import}
        resolved = _resolve(model, self.opset)

        slots: dict[str, int] = {"": _NONE_SLOT}
        initial: list[Any] = [None, None]

        def slot(name: str) -> int:
            # A name nothing produces gets a slot too (reading None): onnx's checker, run after
            # this, reports the broken graph.
            if name not in slots:
                slots[name] = len(initial)
                initial.append(None)
            return slots[name]

        for tensor in graph.initializer:
            initial[slot(tensor.name)] = numpy_helper.to_array(tensor)
        self._input_dtypes = {i.name: _tensor_dtype(i) for i in graph.input}
        #: Names the positional inputs of :meth:`run` fill, in order: the graph inputs that no
        #: initializer provides a default for.
        self.input_names: list[str] = [i.name for i in graph.input if i.name not in slots]
        self._input_slots = {name: slot(name) for name in self._input_dtypes}
        self._positional = [
            (self._input_slots[name], self._input_dtypes[name]) for name in self.input_names
        ]

        steps = []
        placement = []
        last_use: dict[int, int] = {}  # slot -> index (in steps) of the last step reading it
        for position, (node, runner) in enumerate(zip(graph.node, resolved)):
            ours = not isinstance(runner, OpRun)
            placement.append(
                Placement(
                    node.name or f"{node.op_type}#{position}",
                    qualified_op(node),
                    NUMBA_ONNX_OPS if ours else ONNX_REFERENCE,
                )
            )
            inputs = tuple(slot(name) for name in node.input)
            context = None
            if ours:
                call: Callable[..., Any] = runner
                outputs: int | tuple[int, ...] = slot(node.output[0])
            else:
                call = runner.run
                outputs = tuple(slot(name) if name else _UNNAMED_SLOT for name in node.output)
                if runner.need_context():
                    # If, Loop and Scan get, by name, the values of this graph their subgraphs
                    # read (onnx's evaluator passes every value computed so far).
                    context = tuple(
                        (name, slots[name]) for name in sorted(_subgraph_names(node) & set(slots))
                    )
                elif node.op_type == "Constant" and node.domain == "":
                    for value_slot, value in zip(outputs, runner.run()):
                        initial[value_slot] = value
                    continue
            index = len(steps)
            for used in (*inputs, *(used for _, used in context or ())):
                last_use[used] = index
            for made in (outputs,) if ours else outputs:
                last_use.setdefault(made, index)
            steps.append((call, inputs, outputs, context, node))
        # Nothing reads the unnamed outputs' slot: each step writing it drops it at once.
        last_use.pop(_UNNAMED_SLOT, None)

        self.output_names: list[str] = [o.name for o in graph.output]
        self._output_slots = [slot(name) for name in self.output_names]
        self._outputs = _base.namedtupledict("Outputs", self.output_names)
        # Drop a value after the last step that reads it (or after the step that makes it, if
        # nothing does), unless the graph returns it; an unnamed output at once.
        keep = {_NONE_SLOT, *self._output_slots}
        dead = [
            [_UNNAMED_SLOT] if isinstance(outputs, tuple) and _UNNAMED_SLOT in outputs else []
            for _, _, outputs, _, _ in steps
        ]
        for value_slot, index in last_use.items():
            if value_slot not in keep:
                dead[index].append(value_slot)
        self._steps = [
            (call, _gather(inputs), outputs, context, tuple(dead_after), node)
            for (call, inputs, outputs, context, node), dead_after in zip(steps, dead)
        ]
        # The same steps, onnx's op classes computing their dask inputs first.
        self._dask_steps = [
            (step[0] if isinstance(step[2], int) else _computing_dask(step[0]), *step[1:])
            for step in self._steps
        ]
        self._initial = initial
        self._placement = placement
        # The usual run (positional numpy inputs, no If/Loop/Scan) as one function whose
        # values are local variables (``_straight_line``).
        self._straight = (
            None
            if any(context is not None for _, _, _, context, _ in steps)
            else _straight_line(
                steps, dead, initial, self._positional, self._output_slots, self._outputs,
                self._node_error,
            )
        )  # fmt: skip

    def _node_error(self, node: onnx.NodeProto, error: Exception) -> Exception:
        return node_error(node, self._opsets.get(node.domain, self.opset), error)

    def placement(self) -> list[Placement]:
        """Which runtime runs each node of the model's graph, in the graph's order.

        Returns
        -------
        list of Placement
            ``(node, op_type, runtime)`` per node; ``runtime`` is ``"numba_onnx_ops"`` for a
            MatMul or Pow of the default domain and ``"onnx.reference"`` for every other node
            (the MatMul and Pow nodes inside an If, Loop or Scan subgraph run on numba_onnx_ops
            too, within onnx's evaluator).
        """
        return list(self._placement)

    def _plain_arrays(self, inputs: Any) -> bool:
        # The usual call: a list or tuple of every positional input as a numpy array of the
        # declared dtype, which needs none of ``_feeds``'s work (a small product's time).
        if inputs.__class__ is not list and inputs.__class__ is not tuple:
            return False
        if len(inputs) != len(self._positional):
            return False
        for (_, expected), value in zip(self._positional, inputs):
            if value.__class__ is not np.ndarray or (
                expected is not None and value.dtype != expected
            ):
                return False
        return True

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        # A list or tuple, the usual case, first: the abstract classes' checks cost more.
        if not isinstance(inputs, (list, tuple)) and isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self._input_dtypes))
            if unknown:
                raise ValueError(f"unknown model inputs {unknown}; inputs: {self.input_names}")
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple, Sequence)):
                inputs = [inputs]
            if len(inputs) > len(self.input_names):
                raise ValueError(
                    f"{len(inputs)} inputs given; the model takes {len(self.input_names)}: "
                    f"{self.input_names}"
                )
            feeds = dict(zip(self.input_names, inputs))
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ValueError(f"missing model inputs {missing}")
        for name, value in feeds.items():
            expected = self._input_dtypes[name]
            if expected is None:  # no tensor type declared, or a sequence, map or optional
                continue
            dtype = getattr(value, "dtype", None)  # read, not computed, for a dask array
            actual = dtype if isinstance(dtype, np.dtype) else np.asarray(value).dtype
            if actual != expected:
                raise TypeError(f"model input {name!r} must be {expected}, got {actual}")
        return feeds

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run the model.

        Parameters
        ----------
        inputs : sequence of array_like, mapping of str to array_like, or numpy.ndarray
            A sequence fills :attr:`input_names` in order; a mapping feeds inputs by name (and
            may override initializers that are also graph inputs); a single array is the one
            input.
        **kwargs
            Accepted for compatibility with ``onnx.backend.base.BackendRep`` and ignored.

        Returns
        -------
        tuple of numpy.ndarray
            The graph outputs in order, as a named tuple that can also be indexed by name.
            With a ``dask.array.Array`` among the inputs, outputs computed by MatMul and Pow
            alone from it are lazy dask arrays (every node checked when ``run`` is called,
            nothing computed); a node onnx's reference runs computes its dask inputs.

        Raises
        ------
        ValueError
            For missing or unknown inputs, or shapes a node cannot take.
        TypeError
            For an input dtype other than the one the graph declares, or one the operator
            version does not allow.
        """
        if self._straight is not None:
            result = self._straight(inputs)
            if result is not _NOT_PLAIN:
                return result
            plain = False  # (the function made ``_plain_arrays``'s checks)
        else:
            plain = self._plain_arrays(inputs)
        values = self._initial.copy()
        if plain:
            for (slot, _), value in zip(self._positional, inputs):
                values[slot] = value
            steps = self._steps
        else:
            feeds = self._feeds(inputs)
            for name, value in feeds.items():
                values[self._input_slots[name]] = value
            steps = self._dask_steps if dask_operand(*feeds.values()) else self._steps
        step = None
        try:
            for step in steps:
                call, gather, outputs, context, dead, _ = step
                if context is None:
                    result = call(*gather(values))
                else:
                    result = call(*gather(values), context={name: values[i] for name, i in context})
                if outputs.__class__ is int:
                    values[outputs] = result
                else:
                    for i, value in zip(outputs, result):
                        values[i] = value
                for i in dead:
                    values[i] = None
        except (TypeError, ValueError) as error:
            raise self._node_error(step[-1], error) from error
        return self._outputs(*[values[i] for i in self._output_slots])


def _one_node_model(node: onnx.NodeProto, opset: int | None) -> onnx.ModelProto:
    """A model of ``node`` alone, its inputs and outputs untyped, importing ``opset`` (newest if
    None) of the default domain and version 1 of the node's own domain."""
    opsets = [helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())]
    if node.domain not in DEFAULT_DOMAINS:
        opsets.append(helper.make_opsetid(node.domain, 1))
    names = dict.fromkeys(name for name in node.input if name)
    graph = helper.make_graph(
        [node],
        node.name or node.op_type,
        [helper.make_empty_tensor_value_info(name) for name in names],
        [helper.make_empty_tensor_value_info(name) for name in node.output if name],
    )
    return helper.make_model(graph, opset_imports=opsets)


def _check_device(device: str) -> None:
    if not Backend.supports_device(device):
        raise ValueError(f"numba_onnx_ops runs on the CPU only, not on device {device!r}")


class Backend(_base.Backend):
    """Runs ONNX models and nodes on the CPU: MatMul and Pow on numba_onnx_ops' kernels, every
    other operator on onnx's reference implementation."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether every node of ``model`` is one this backend can run on ``device``."""
        if not cls.supports_device(device):
            return False
        try:
            _resolve(model, _model_opset(model))
        except (NotImplementedError, ValueError, RuntimeError, TypeError):
            return False
        return True

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto | str | os.PathLike | bytes, device: str = "CPU", **kwargs: Any
    ) -> BackendRep:
        """Check a model and resolve each of its nodes to the function that runs it.

        Parameters
        ----------
        model : onnx.ModelProto, path or bytes
            The model; a path or serialized bytes are loaded with ``onnx.load``.
        device : str, default "CPU"
            Only the CPU is supported.
        **kwargs
            Accepted for compatibility with ``onnx.backend.base.Backend`` and ignored.

        Returns
        -------
        BackendRep
            Run it with ``rep.run(inputs)``; ``rep.placement()`` tells which node runs where.

        Raises
        ------
        NotImplementedError
            If a node's operator is neither a default-domain MatMul or Pow nor one onnx's
            reference evaluator implements; the message names the operator and its domain.
        ValueError
            For a device other than the CPU, a model without a default-domain opset, a
            malformed MatMul or Pow node (see :func:`check_node`).
        onnx.checker.ValidationError
            If ``onnx.checker.check_model`` rejects the model for another reason.
        """
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        elif not isinstance(model, onnx.ModelProto):
            model = onnx.load(model)
        _check_device(device)
        # Our own checks first, so that an operator nobody implements or a malformed MatMul/Pow
        # node is reported in our words; then onnx's checker for everything else about the graph.
        try:
            rep = BackendRep(model)
        except (NotImplementedError, ValueError):
            raise
        except Exception:
            # onnx's op classes can fail in odd ways on a malformed node: the checker's message
            # is the better one when it has one.
            super().prepare(model, device, **kwargs)
            raise
        super().prepare(model, device, **kwargs)
        return rep

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        """Prepare ``model`` and run it once on ``inputs`` (see :meth:`BackendRep.run`)."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run a single node, of any operator :meth:`prepare` runs.

        Parameters
        ----------
        node : onnx.NodeProto
            The node.
        inputs : sequence or mapping of array_like
            The node's inputs, in order (one per entry of ``node.input``; the value given for an
            empty name is ignored) or by name.
        device : str, default "CPU"
            Only the CPU is supported.
        outputs_info : optional
            Ignored (the output dtype and shape follow from the inputs).
        **kwargs
            ``opset_version=N`` runs the node as in a model importing default-domain opset N;
            without it the newest operator version runs (a node of another domain: version 1
            of that domain). Anything else is ignored.

        Returns
        -------
        tuple of numpy.ndarray
            The node's outputs (those it names), as a named tuple that can also be indexed by name.

        Raises
        ------
        NotImplementedError, ValueError, TypeError
            As :meth:`prepare` and :meth:`BackendRep.run`.
        """
        _check_device(device)
        opset = kwargs.get("opset_version")
        if is_ours(node):
            kernel = _kernel(node, opset)
        else:
            rep = BackendRep(_one_node_model(node, opset))
        super().run_node(node, inputs, device, outputs_info, **kwargs)
        if isinstance(inputs, Mapping):
            missing = [name for name in node.input if name and name not in inputs]
            if missing:
                raise ValueError(f"missing inputs {missing} for {describe(node)}")
            args = [inputs.get(name) for name in node.input]
        else:
            args = list(inputs)
            if len(args) != len(node.input):
                raise ValueError(
                    f"{len(args)} inputs given for {describe(node)}, which takes {len(node.input)}"
                )
        if not is_ours(node):
            return rep.run({name: arg for name, arg in zip(node.input, args) if name})
        try:
            result = kernel(*args)
        except (TypeError, ValueError) as error:
            raise node_error(node, opset, error) from error
        return _base.namedtupledict("Outputs", list(node.output))(result)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """True for ``"CPU"`` (and ``"CPU:n"``), False for any other device."""
        try:
            return _base.Device(device).type == _base.DeviceType.CPU
        except (AttributeError, ValueError):
            return False


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
