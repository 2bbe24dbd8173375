"""MatMul and Pow for onnx's reference evaluator, running on numba_onnx_ops' kernels.

>>> from numba_onnx_ops.reference import ReferenceEvaluator
>>> sess = ReferenceEvaluator(model)                # doctest: +SKIP
>>> (y,) = sess.run(None, {"x": x})                 # doctest: +SKIP

MatMul and Pow nodes run on numba_onnx_ops; every other operator keeps onnx's own
implementation.

Where the operators reach
-------------------------
onnx's own ``onnx.reference.ReferenceEvaluator(model, new_ops=OPS)`` hands ``new_ops`` to the
subgraphs of If, Loop and Scan, but builds the body of every function the model defines (and of
every operator it expands into its function body) with ``type(self)(function)``, without
``new_ops``: a MatMul or Pow inside a model-local function runs on onnx's own code there.
:class:`ReferenceEvaluator` is that evaluator with :data:`OPS` built in, so the evaluators it
builds for function bodies get them too (and any other ``new_ops`` given, see its docstring).

Versions
--------
``ReferenceEvaluator`` looks a class in ``new_ops`` up by ``(op_domain, __name__)`` only, so a
class named ``Pow_7`` would never be picked for a node of type ``Pow``: versioned class names work
for onnx's built-in operators, not for ``new_ops``. Hence there is one class per operator, named
after it, and each node resolves its version when the evaluator builds it, from the default-domain
opset the model imports (``run_params["opsets"]``). The node then gets that version's schema
(``onnx.defs.get_schema``), so the attributes and their defaults are the ones of that version:
Pow-1's ``broadcast`` (default 0) and ``axis`` reach the kernel, and the same attributes on a
later Pow are refused as the malformed node they are.

Errors
------
A node the version does not define (an unknown attribute, a wrong number of inputs) is refused
when the evaluator is built, with :func:`check_node`'s ``ValueError``. A dtype the version does
not allow raises a ``TypeError`` whose message names the node, the opset and the refused dtype
(``OpRun.run`` would otherwise replace it by its generic "Issues with types ..." message).

This module needs the optional ``onnx`` package (``pip install 'numba_onnx_ops[onnx]'``);
``import numba_onnx_ops`` never imports it.
"""

from __future__ import annotations

import functools
from typing import Any

try:
    import onnx
    import onnx.reference
    from onnx.reference.op_run import OpRun
except ModuleNotFoundError as error:
    if error.name is None or error.name.partition(".")[0] != "onnx":
        raise
    raise ImportError(
        "numba_onnx_ops.backend and numba_onnx_ops.reference need the optional onnx package: "
        "pip install 'numba_onnx_ops[onnx]'"
    ) from error

import numpy as np

import numba_onnx_ops as _api

__all__ = ["OPS", "MatMul", "Pow", "ReferenceEvaluator"]

#: Operators (default ONNX domain) that run on numba_onnx_ops' kernels.
SUPPORTED_OPS: tuple[str, ...] = ("MatMul", "Pow")

# "" and "ai.onnx" are two spellings of the default domain.
DEFAULT_DOMAINS = ("", "ai.onnx")

# The legacy Pow-1 attributes: named in the error when a later version sees them.
_POW1_ATTRIBUTES = ("broadcast", "axis")


def is_ours(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is a MatMul or Pow of the default domain, i.e. runs on our kernels."""
    return node.op_type in SUPPORTED_OPS and node.domain in DEFAULT_DOMAINS


def describe(node: onnx.NodeProto) -> str:
    """A short name for ``node`` in error messages, even when it has no name."""
    if node.name:
        return f"node {node.name!r}"
    return f"node ({', '.join(node.input)}) -> ({', '.join(node.output)})"


def qualified_op(node: onnx.NodeProto) -> str:
    """The node's operator as ``"Relu"`` (default domain) or ``"com.example::Relu"``."""
    return f"{node.domain}::{node.op_type}" if node.domain else node.op_type


def node_error(node: onnx.NodeProto, opset: int | None, error: Exception) -> Exception:
    """``error`` (a TypeError or ValueError) again, with a message that names the node and opset."""
    at = "the newest opset" if opset is None else f"opset {opset}"
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(f"{node.op_type} {describe(node)} at {at}: {error}")


def check_node(node: onnx.NodeProto, opset: int | None) -> int:
    """Check that numba_onnx_ops' kernels can run ``node`` and return the operator version it runs.

    Parameters
    ----------
    node : onnx.NodeProto
        A MatMul or Pow node.
    opset : int or None
        The default-domain opset the node's model imports; ``None`` means the newest version.

    Returns
    -------
    int
        The resolved operator version (``since_version``), e.g. 7 for Pow at opset 11.

    Raises
    ------
    NotImplementedError
        If the node's operator is not MatMul or Pow of the default domain; the message names it.
    ValueError
        If the opset is invalid, or the node is malformed for that version: wrong number of
        inputs or outputs, an empty input name, an attribute the version does not define, or an
        attribute of the wrong type.
    """
    if not is_ours(node):
        raise NotImplementedError(
            f"numba_onnx_ops has no implementation of operator {qualified_op(node)!r} "
            f"({describe(node)}); it runs only {', '.join(SUPPORTED_OPS)} from the default ONNX "
            "domain"
        )
    op = node.op_type
    version = _api.resolve_version(op, opset)
    schema = onnx.defs.get_schema(op, version, "")
    name = f"{op}-{version}"
    if not schema.min_input <= len(node.input) <= schema.max_input or "" in node.input:
        raise ValueError(
            f"{name} {describe(node)} has inputs {list(node.input)}; it takes exactly "
            f"{schema.min_input} ({', '.join(i.name for i in schema.inputs)})"
        )
    if not schema.min_output <= len(node.output) <= schema.max_output or "" in node.output:
        raise ValueError(
            f"{name} {describe(node)} has outputs {list(node.output)}; it produces exactly "
            f"{schema.min_output} ({', '.join(o.name for o in schema.outputs)})"
        )
    for attribute in node.attribute:
        expected = schema.attributes.get(attribute.name)
        if expected is None:
            allowed = ", ".join(sorted(schema.attributes)) or "none"
            hint = ""
            if op == "Pow" and attribute.name in _POW1_ATTRIBUTES:
                hint = " (broadcast and axis exist only in Pow-1, i.e. opset < 7)"
            raise ValueError(
                f"{name} {describe(node)} has attribute {attribute.name!r}, which {name} does "
                f"not define{hint}; its attributes: {allowed}"
            )
        if attribute.type != expected.type:
            got = onnx.AttributeProto.AttributeType.Name(attribute.type)
            raise ValueError(
                f"{name} {describe(node)}: attribute {attribute.name!r} must be of type "
                f"{expected.type.name}, got {got}"
            )
    return version


class _VersionedOpRun(OpRun):
    """An ``OpRun`` whose operator version follows the opset of the model being evaluated."""

    op_domain = ""

    def __init__(
        self, onnx_node: onnx.NodeProto, run_params: dict[str, Any], schema: Any = None
    ) -> None:
        # The evaluator registers every default-domain node under "" in its opsets.
        opset = run_params.get("opsets", {}).get(onnx_node.domain)
        #: The default-domain opset of the model (None: the newest version).
        self.opset: int | None = opset
        #: The operator version this node runs, e.g. 7 for Pow at opset 11.
        self.since_version: int = check_node(onnx_node, opset)
        if schema is None:
            schema = onnx.defs.get_schema(onnx_node.op_type, self.since_version, "")
        super().__init__(onnx_node, run_params, schema)

    def run(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``OpRun.run``, raising the kernel's TypeError (e.g. a dtype the version refuses) with
        its own message, naming the node, instead of ``OpRun``'s "Issues with types ..."."""
        try:
            return super().run(*args, **kwargs)
        except TypeError as error:
            # OpRun.run re-raises every TypeError of _run as its own generic one, keeping ours
            # only as the cause, which tracebacks show but str(error) and logs do not.
            cause = error.__cause__
            if not isinstance(cause, TypeError):
                raise
            raise node_error(self.onnx_node, self.opset, cause) from cause


class MatMul(_VersionedOpRun):
    """ONNX MatMul (versions 1, 9, 13) on :func:`numba_onnx_ops.matmul`."""

    def _run(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:
        return (_api.matmul(a, b, opset=self.opset),)


class Pow(_VersionedOpRun):
    """ONNX Pow (versions 1, 7, 12, 13, 15) on :func:`numba_onnx_ops.pow`.

    At Pow-1 the node's ``broadcast`` and ``axis`` attributes are passed on.
    """

    def _run(
        self,
        x: np.ndarray,
        y: np.ndarray,
        broadcast: int | None = None,
        axis: int | None = None,
    ) -> tuple[np.ndarray]:
        if self.since_version == 1:
            return (_api.pow(x, y, opset=self.opset, broadcast=broadcast, axis=axis),)
        return (_api.pow(x, y, opset=self.opset),)


#: The operators to pass as ``ReferenceEvaluator(model, new_ops=OPS)``.
OPS: list[type[OpRun]] = [MatMul, Pow]


@functools.cache
def _with_ops(cls: type, ops: tuple[type[OpRun], ...]) -> type:
    """A subclass of ``cls`` whose evaluators all add ``ops`` (made once per pair)."""
    return type(cls.__name__, (cls,), {"__module__": cls.__module__, "added_ops": ops})


class ReferenceEvaluator(onnx.reference.ReferenceEvaluator):
    """``onnx.reference.ReferenceEvaluator`` with MatMul and Pow on numba_onnx_ops' kernels in
    the graph, in the subgraphs of If, Loop and Scan, and in the bodies of the functions the
    model defines.

    It takes onnx's evaluator's arguments. ``new_ops`` adds operator classes as there, ahead of
    :data:`OPS` (a class given for MatMul or Pow replaces ours), and reaches function bodies too.
    """

    #: The operator classes every evaluator of this class adds, function bodies' included.
    added_ops: tuple[type[OpRun], ...] = tuple(OPS)

    def __new__(cls, *args: Any, new_ops: Any = None, **kwargs: Any) -> ReferenceEvaluator:
        # onnx builds a function's evaluator as ``type(self)(function)``, without new_ops: the
        # classes given here travel in the class itself.
        extra = tuple(op for op in new_ops or () if op not in cls.added_ops)
        if extra:
            cls = _with_ops(cls, extra + cls.added_ops)
        return super().__new__(cls)

    def __init__(self, proto: Any, *args: Any, new_ops: Any = None, **kwargs: Any) -> None:
        super().__init__(proto, *args, new_ops=list(self.added_ops), **kwargs)
