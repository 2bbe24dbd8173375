"""The contenders: this library and its peers, each a zero-argument call with its inputs bound.

Peers: ``numpy`` (what a user writes: ``a @ b``, ``x ** 3.7``, cast back to the input dtype where
numpy promotes), ``numpy f32 upcast`` for the half types (``float32`` compute, one cast back), and
``onnxruntime`` (a one-node model, CPU provider, as many intra-op threads as numba uses, the session
built once), when installed.

A ``"Model"`` case (:func:`.cases.chain_model`) runs on its runtime (``Case.runtime``): on our
``Backend`` against onnxruntime (no numpy); or in onnx's ``ReferenceEvaluator`` with our MatMul
and Pow (``new_ops=numba_onnx_ops.reference.OPS``) against the same evaluator alone, which runs
onnx's numpy implementation of every operator and so is the ``numpy`` contender of those cases
(onnxruntime does not take part).  Only the public API of the package is used here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import matmul, pow
from .cases import EVALUATOR, HALF_TYPES, Case, chain_model

OURS = "numba_onnx_ops"
NUMPY = "numpy"
UPCAST = "numpy f32 upcast"
ORT = "onnxruntime"
CONTENDERS = (OURS, NUMPY, UPCAST, ORT)
PEERS = CONTENDERS[1:]

#: Default-domain opset of the onnxruntime models: MatMul-13 and Pow-15 (the newest versions),
#: unless the case sets its own.
ORT_OPSET = {"MatMul": 13, "Pow": 15}


class Unavailable(Exception):
    """A contender that cannot run this case (not installed, or no kernel for these dtypes)."""


def _evaluator(case: Case, x: np.ndarray, weights: np.ndarray, *, ours: bool):
    """A run of a model case's model on ``x`` in onnx's ``ReferenceEvaluator``, with our MatMul
    and Pow (``ours``) or alone (onnx's numpy implementation)."""
    try:
        from onnx.reference import ReferenceEvaluator

        from ..integrations.onnx_evaluator import OPS
    except ImportError:  # (our module's own ImportError names the extra, not a module)
        raise Unavailable("not installed (onnx)") from None
    model = chain_model(weights, case.exponent)
    evaluator = ReferenceEvaluator(model, new_ops=OPS if ours else None)
    return lambda: evaluator.run(None, {"x": x})[0]


def _ours(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    if case.op == "Model":
        if case.runtime == EVALUATOR:
            return _evaluator(case, a, b, ours=True)
        try:
            from ..integrations.onnx_backend import Backend
        except ImportError:  # (the module's own ImportError names the extra, not a module)
            raise Unavailable("not installed (onnx)") from None
        rep = Backend.prepare(chain_model(b, case.exponent))
        return lambda: rep.run([a])[0]
    op = matmul if case.op == "MatMul" else pow
    y = b.item() if case.python_exponent else b
    opset = case.opset
    if opset is None:  # no keyword at all: what a call without one costs
        return lambda: op(a, y)
    return lambda: op(a, y, opset=opset)


def _numpy(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    if case.op == "Model":
        if case.runtime == EVALUATOR:
            return _evaluator(case, a, b, ours=False)  # the evaluator alone
        raise Unavailable("-")  # the Backend's peer is onnxruntime
    if case.op == "MatMul":
        expr = np.matmul
    elif b.ndim == 0:
        # A Python scalar, as a numpy user writes it: weakly typed, and numpy's ``**`` takes its
        # shortcuts (square, sqrt, reciprocal) only for scalars.
        y = int(b) if b.dtype.kind in "iu" else float(b)

        def expr(x, _b):
            return x**y
    else:
        expr = np.power
    # Where numpy promotes (bfloat16 results come back as float32, float32 ** int64 arrays as
    # float64), the cast back to the input dtype is part of the work. A 1x1 probe tells.
    if expr(np.ones((1, 1), a.dtype), np.ones((1, 1), b.dtype)).dtype == a.dtype:
        return lambda: expr(a, b)
    return lambda: expr(a, b).astype(a.dtype)


def _numpy_upcast(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    if a.dtype not in HALF_TYPES:
        raise Unavailable("-")  # only the half types have a float32 detour
    f32 = np.float32
    if case.op == "MatMul":
        return lambda: np.matmul(a.astype(f32), b.astype(f32)).astype(a.dtype)
    if b.ndim == 0:
        y = f32(b)
        return lambda: (a.astype(f32) ** y).astype(a.dtype)
    return lambda: np.power(a.astype(f32), b.astype(f32)).astype(a.dtype)


def ort_session(model):
    """An onnxruntime session of ``model`` (an ``onnx.ModelProto``) on the CPU provider, with as
    many intra-op threads as numba uses and one inter-op thread, its warnings silenced."""
    import numba
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = numba.get_num_threads()  # the same thread count as ours
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _onnxruntime(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    if case.runtime == EVALUATOR:
        raise Unavailable("-")  # the evaluator's peer is the evaluator alone
    try:
        import onnxruntime  # noqa: F401 - only whether it is there
        from onnx import helper
    except ImportError as exc:
        raise Unavailable(f"not installed ({exc.name})") from None
    if case.op == "Model":
        model, feeds = chain_model(b, case.exponent), {"x": a}
    else:

        def info(name, dtype):
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), None)

        out_type = helper.np_dtype_to_tensor_dtype(a.dtype)
        graph = helper.make_graph(
            [helper.make_node(case.op, ["a", "b"], ["out"])],
            f"{case.op.lower()}_bench",
            [info("a", a.dtype), info("b", b.dtype)],
            [helper.make_tensor_value_info("out", out_type, None)],
        )
        opset = case.opset or ORT_OPSET[case.op]
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10  # onnxruntime reads IR <= 11; onnx may write a newer one
        feeds = {"a": a, "b": b}
    try:
        session = ort_session(model)
    except Exception as exc:  # onnxruntime raises its own error types, e.g. NotImplemented
        kernel = f"{case.op}({a.dtype}, {b.dtype})"
        reason = f"no {kernel} kernel" if "NOT_IMPLEMENTED" in str(exc) else str(exc)
        raise Unavailable(reason) from None
    outputs = [model.graph.output[0].name]
    return lambda: session.run(outputs, feeds)[0]


FACTORIES = {OURS: _ours, NUMPY: _numpy, UPCAST: _numpy_upcast, ORT: _onnxruntime}
