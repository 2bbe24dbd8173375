"""The contenders: this library and its peers, each a zero-argument call with its inputs bound.

Peers: ``numpy`` (what a user writes: ``a @ b``, ``x ** 3.7``, cast back to the input dtype where
numpy promotes), ``numpy f32 upcast`` for the half types (``float32`` compute, one cast back),
``onnxruntime`` (a one-node model, CPU provider, as many intra-op threads as numba uses, the session
built once), when installed, and ``torch`` (``torch.matmul``, ``torch.pow``: PyTorch's CPU kernels,
MKL and oneDNN among them, on as many threads as numba uses), when installed; torch is never a
dependency of the package or of an extra (:data:`TORCH_INSTALL` says how to get its CPU build).
Every contender runs on the same number of threads: :func:`contender_threads` sets it for a case.

A ``"Model"`` case (:func:`.cases.chain_model`) runs on its runtime (``Case.runtime``): on our
``Backend`` against onnxruntime (no numpy); or in onnx's ``ReferenceEvaluator`` with our MatMul
and Pow (``new_ops=numba_onnx_ops.reference.OPS``) against the same evaluator alone, which runs
onnx's numpy implementation of every operator and so is the ``numpy`` contender of those cases
(onnxruntime does not take part).  Only the public API of the package is used here.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import matmul, pow
from ..core.dtypes import bfloat16, is_bfloat16, is_half
from .cases import EVALUATOR, Case, chain_model

OURS = "numba_onnx_ops"
NUMPY = "numpy"
UPCAST = "numpy f32 upcast"
ORT = "onnxruntime"
TORCH = "torch"
CONTENDERS = (OURS, NUMPY, UPCAST, ORT, TORCH)
PEERS = CONTENDERS[1:]
#: The contenders of the main job (``python -m numba_onnx_ops``), which stays short: not torch,
#: whose import alone takes seconds.
MAIN_CONTENDERS = (OURS, NUMPY, UPCAST, ORT)

#: How to install the optional torch contender: PyTorch's CPU build, from its own index.
TORCH_INSTALL = (
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu (the CPU "
    "build; a plain pip install torch can pull a CUDA build of several GB)"
)

#: The fewest calls back to back that make one sample, by contender (others: one, as many as
#: fill ``Timing.min_sample_s``).  PyTorch's OpenMP threads go to sleep during the pause before
#: each sample (it is there for onnxruntime's and OpenBLAS's spinning threads) and wake slowly:
#: its first call after the pause costs far more than the next ones, so torch is timed in
#: blocks of several calls, its steady state, even where one call fills a sample.
MIN_CALLS_PER_SAMPLE = {TORCH: 5}


def available_contenders(contenders: tuple[str, ...] = CONTENDERS) -> tuple[str, ...]:
    """``contenders`` less torch where it is not installed (so that no column of the table
    says so on every row); found without importing it."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a finder that refuses it; a module without a spec
        found = False
    return contenders if found else tuple(name for name in contenders if name != TORCH)


@contextlib.contextmanager
def contender_threads(count: int) -> Iterator[bool]:
    """Every contender on ``count`` threads while the block runs: numba's (whose count
    onnxruntime's sessions and torch take when a factory builds them) and numpy's BLAS, through
    threadpoolctl (the ``bench`` extra).  Yields whether the BLAS could be limited: without
    threadpoolctl it keeps its own count (``OPENBLAS_NUM_THREADS``, else one per core), and so
    do the float products of ours that go to it.

    Raises
    ------
    ValueError
        If ``count`` is more than numba's pool has (``NUMBA_NUM_THREADS``).
    """
    import numba

    saved = numba.get_num_threads()
    numba.set_num_threads(count)
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            yield False
        else:
            with threadpool_limits(limits=count, user_api="blas"):
                yield True
    finally:
        numba.set_num_threads(saved)


def as_array(out: Any) -> np.ndarray:
    """A contender's result as a numpy array, for the check: a torch tensor through a view of
    its memory (bfloat16 through its bits, a type torch's ``numpy()`` does not know)."""
    if isinstance(out, np.ndarray) or type(out).__module__.partition(".")[0] != "torch":
        return np.asarray(out)
    import torch

    if out.dtype == torch.bfloat16:
        return out.view(torch.int16).numpy().view(bfloat16())
    return out.numpy()


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
    if not is_half(a.dtype):
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


def _torch_tensor(torch, x: np.ndarray):
    """``x`` as a tensor sharing its memory (bfloat16 through its bits: numpy's bfloat16 is
    ml_dtypes', which ``torch.from_numpy`` does not take)."""
    if is_bfloat16(x.dtype):
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def _torch(case: Case, a: np.ndarray, b: np.ndarray) -> Callable[[], Any]:
    if case.op == "Model":
        raise Unavailable("-")  # a model's peers are its runtimes'
    try:
        import torch
    except ImportError:
        raise Unavailable("not installed (torch)") from None
    import numba

    torch.set_num_threads(numba.get_num_threads())  # the same thread count as ours
    # The tensors once, here: the timed call is the operator alone, as a torch user's loop runs
    # it on tensors it already has.  The call returns a tensor; ``as_array`` reads it.
    ta = _torch_tensor(torch, a)
    if case.op == "MatMul":
        op, y = torch.matmul, _torch_tensor(torch, b)
    elif b.ndim == 0:  # a Python number, as a torch user writes ``x ** 3.7``
        op, y = torch.pow, int(b) if b.dtype.kind in "iu" else float(b)
    else:
        op, y = torch.pow, _torch_tensor(torch, b)

    # A probe on one element: a dtype torch has no CPU kernel for (uint32, uint64), and where
    # torch promotes (an integer base to a float exponent), the cast back that is part of the work.
    def first(t):  # one element, of the same rank
        return t.reshape(-1)[:1].reshape((1,) * t.ndim) if isinstance(t, torch.Tensor) else t

    try:
        probe = op(first(ta), first(y))
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        kernel = f"{case.op}({a.dtype}, {b.dtype})"
        raise Unavailable(f"no {kernel} kernel in torch ({type(exc).__name__})") from None
    if probe.dtype == ta.dtype:
        return lambda: op(ta, y)
    dtype = ta.dtype
    return lambda: op(ta, y).to(dtype)


FACTORIES = {
    OURS: _ours,
    NUMPY: _numpy,
    UPCAST: _numpy_upcast,
    ORT: _onnxruntime,
    TORCH: _torch,
}
