"""MatMul and Pow for onnx's reference evaluator, running on numba_onnx_ops' kernels.

>>> from onnx.reference import ReferenceEvaluator
>>> from numba_onnx_ops.reference import OPS
>>> sess = ReferenceEvaluator(model, new_ops=OPS)   # doctest: +SKIP
>>> (y,) = sess.run(None, {"x": x})                 # doctest: +SKIP

MatMul and Pow nodes run on numba_onnx_ops; every other operator keeps onnx's own
implementation.

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

This module needs the optional ``onnx`` package (``pip install numba_onnx_ops[onnx]``);
``import numba_onnx_ops`` never imports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.reference.op_run import OpRun

import numba_onnx_ops as _api

from .onnx_backend import check_node

__all__ = ["OPS", "MatMul", "Pow"]


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
