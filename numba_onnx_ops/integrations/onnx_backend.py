"""An ONNX backend (``onnx.backend.base.Backend``) that runs MatMul and Pow on numba_onnx_ops.

>>> from numba_onnx_ops.backend import Backend
>>> rep = Backend.prepare(model)                 # doctest: +SKIP
>>> (y,) = rep.run([x])                          # doctest: +SKIP
>>> (z,) = Backend.run_node(node, [x, y], opset_version=13)  # doctest: +SKIP

Models and nodes may contain only MatMul and Pow from the default ONNX domain; anything else is
refused before anything runs, with an error that names the operator. The operator version
follows the default-domain opset the model imports (``opset_version=`` for :meth:`run_node`),
exactly as :func:`numba_onnx_ops.resolve_version` maps it, and Pow-1's ``broadcast`` and ``axis``
attributes are read from the node.

This module needs the optional ``onnx`` package (``pip install numba_onnx_ops[onnx]``);
``import numba_onnx_ops`` never imports it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.backend.base as _base
from onnx import helper, numpy_helper

import numba_onnx_ops as _api

__all__ = ["SUPPORTED_OPS", "Backend", "BackendRep", "check_node", "default_opset"]

#: Operators (default ONNX domain) this backend runs.
SUPPORTED_OPS: tuple[str, ...] = ("MatMul", "Pow")

# "" and "ai.onnx" are two spellings of the default domain.
_DEFAULT_DOMAINS = ("", "ai.onnx")

# The legacy Pow-1 attributes: named in the error when a later version sees them.
_POW1_ATTRIBUTES = ("broadcast", "axis")


def _describe(node: onnx.NodeProto) -> str:
    """A short name for ``node`` in error messages, even when it has no name."""
    if node.name:
        return f"node {node.name!r}"
    return f"node ({', '.join(node.input)}) -> ({', '.join(node.output)})"


def check_node(node: onnx.NodeProto, opset: int | None) -> int:
    """Check that this backend can run ``node`` and return the operator version it runs.

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
    if node.domain not in _DEFAULT_DOMAINS or node.op_type not in SUPPORTED_OPS:
        where = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        raise NotImplementedError(
            f"numba_onnx_ops has no implementation of operator {where!r} ({_describe(node)}); "
            f"it runs only {', '.join(SUPPORTED_OPS)} from the default ONNX domain"
        )
    op = node.op_type
    version = _api.resolve_version(op, opset)
    schema = onnx.defs.get_schema(op, version, "")
    name = f"{op}-{version}"
    if not schema.min_input <= len(node.input) <= schema.max_input or "" in node.input:
        raise ValueError(
            f"{name} {_describe(node)} has inputs {list(node.input)}; it takes exactly "
            f"{schema.min_input} ({', '.join(i.name for i in schema.inputs)})"
        )
    if not schema.min_output <= len(node.output) <= schema.max_output or "" in node.output:
        raise ValueError(
            f"{name} {_describe(node)} has outputs {list(node.output)}; it produces exactly "
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
                f"{name} {_describe(node)} has attribute {attribute.name!r}, which {name} does "
                f"not define{hint}; its attributes: {allowed}"
            )
        if attribute.type != expected.type:
            got = onnx.AttributeProto.AttributeType.Name(attribute.type)
            raise ValueError(
                f"{name} {_describe(node)}: attribute {attribute.name!r} must be of type "
                f"{expected.type.name}, got {got}"
            )
    return version


def default_opset(model: onnx.ModelProto) -> int:
    """Return the default-domain opset that ``model`` imports.

    Raises
    ------
    ValueError
        If the model imports no default-domain opset.
    """
    for entry in model.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return int(entry.version)
    raise ValueError("the model imports no opset of the default ONNX domain ('' or 'ai.onnx')")


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


def _run(
    node: onnx.NodeProto, kernel: Callable[..., np.ndarray], args: Sequence[Any], opset: int | None
) -> np.ndarray:
    """Run one node, naming it in a TypeError or ValueError the library raises."""
    try:
        return kernel(*args)
    except (TypeError, ValueError) as error:
        at = "the newest opset" if opset is None else f"opset {opset}"
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"{node.op_type} {_describe(node)} at {at}: {error}") from error


def _check_device(device: str) -> None:
    if not Backend.supports_device(device):
        raise ValueError(f"numba_onnx_ops runs on the CPU only, not on device {device!r}")


def _tensor_dtype(value_info: onnx.ValueInfoProto) -> np.dtype | None:
    """The numpy dtype a graph input declares, or None if it declares no tensor element type."""
    if not value_info.type.HasField("tensor_type"):
        return None
    elem_type = value_info.type.tensor_type.elem_type
    if elem_type == onnx.TensorProto.UNDEFINED:
        return None
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


class BackendRep(_base.BackendRep):
    """A model checked and bound to numba_onnx_ops, ready to run repeatedly.

    Made by :meth:`Backend.prepare`; not meant to be constructed directly.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        if len(graph.sparse_initializer):
            raise NotImplementedError("numba_onnx_ops does not support sparse initializers")
        self.opset: int = default_opset(model)
        self._nodes = [(node, _kernel(node, self.opset)) for node in graph.node]
        self._initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self._input_dtypes = {i.name: _tensor_dtype(i) for i in graph.input}
        #: Names the positional inputs of :meth:`run` fill, in order: the graph inputs that no
        #: initializer provides a default for.
        self.input_names: list[str] = [
            i.name for i in graph.input if i.name not in self._initializers
        ]
        self.output_names: list[str] = [o.name for o in graph.output]
        self._outputs = _base.namedtupledict("Outputs", self.output_names)

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self._input_dtypes))
            if unknown:
                raise ValueError(f"unknown model inputs {unknown}; inputs: {self.input_names}")
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
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
            dtype = getattr(value, "dtype", None)  # read, not computed, for a dask array
            actual = dtype if isinstance(dtype, np.dtype) else np.asarray(value).dtype
            if expected is not None and actual != expected:
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
            With a ``dask.array.Array`` among the inputs, outputs that depend on it are lazy
            dask arrays (every node checked when ``run`` is called, nothing computed).

        Raises
        ------
        ValueError
            For missing or unknown inputs, or shapes a node cannot take.
        TypeError
            For an input dtype other than the one the graph declares, or one the operator
            version does not allow.
        """
        values: dict[str, Any] = {**self._initializers, **self._feeds(inputs)}
        for node, kernel in self._nodes:
            args = [values[name] for name in node.input]
            values[node.output[0]] = _run(node, kernel, args, self.opset)
        return self._outputs(*(values[name] for name in self.output_names))


class Backend(_base.Backend):
    """Runs ONNX models and nodes made of MatMul and Pow on numba_onnx_ops' kernels (CPU only)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether every node of ``model`` is a MatMul or Pow this backend can run on ``device``."""
        if not cls.supports_device(device):
            return False
        try:
            opset = default_opset(model)
            for node in model.graph.node:
                check_node(node, opset)
        except (NotImplementedError, ValueError):
            return False
        return True

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto | str | os.PathLike | bytes, device: str = "CPU", **kwargs: Any
    ) -> BackendRep:
        """Check a model and bind its nodes to numba_onnx_ops.

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
            Run it with ``rep.run(inputs)``.

        Raises
        ------
        NotImplementedError
            If a node is not a default-domain MatMul or Pow; the message names the operator.
        ValueError
            For a device other than the CPU, a model without a default-domain opset, a
            malformed node (see :func:`check_node`).
        onnx.checker.ValidationError
            If ``onnx.checker.check_model`` rejects the model for another reason.
        """
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        elif not isinstance(model, onnx.ModelProto):
            model = onnx.load(model)
        _check_device(device)
        # Our own checks first, so that an unsupported operator or a malformed MatMul/Pow node is
        # reported in our words; then onnx's checker for everything else about the graph.
        rep = BackendRep(model)
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
        """Run a single MatMul or Pow node.

        Parameters
        ----------
        node : onnx.NodeProto
            The node.
        inputs : sequence or mapping of array_like
            The node's inputs, in order or by name.
        device : str, default "CPU"
            Only the CPU is supported.
        outputs_info : optional
            Ignored (the output dtype and shape follow from the inputs).
        **kwargs
            ``opset_version=N`` runs the node as in a model importing default-domain opset N;
            without it the newest operator version runs. Anything else is ignored.

        Returns
        -------
        tuple of numpy.ndarray
            The one output, as a named tuple that can also be indexed by the output's name.

        Raises
        ------
        NotImplementedError, ValueError, TypeError
            As :meth:`prepare` and :meth:`BackendRep.run`.
        """
        _check_device(device)
        opset = kwargs.get("opset_version")
        kernel = _kernel(node, opset)
        super().run_node(node, inputs, device, outputs_info, **kwargs)
        if isinstance(inputs, Mapping):
            missing = [name for name in node.input if name not in inputs]
            if missing:
                raise ValueError(f"missing inputs {missing} for {_describe(node)}")
            args = [inputs[name] for name in node.input]
        else:
            args = list(inputs)
            if len(args) != len(node.input):
                raise ValueError(
                    f"{len(args)} inputs given for {_describe(node)}, which takes {len(node.input)}"
                )
        result = _run(node, kernel, args, opset)
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
