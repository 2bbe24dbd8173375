"""Per-call cost on small tensors, and a small model through the ONNX integrations.

At these sizes the kernels take little of the time: the front layer (checks, dispatch,
allocation, a launch) and, for a model, the runtime's own work per node take the rest.  numpy's
time for the same call is the same-run peer (``time_numpy*``), onnxruntime the model's.  Every
class warms up in ``setup``, so no time holds a compilation.
"""

from __future__ import annotations

import numpy as np

from numba_onnx_ops import matmul, pow  # noqa: A004 - the ONNX operator's name

from .common import POW_X_DTYPES, dtype, random_array, shape

#: The exponents, each with and without ``opset=15``: a Python number as a numpy user writes it,
#: a square (a shortcut for numpy and for us: 2.0, or 2 for integer bases) or a general power
#: (3.7, or 3), and a same-shape array of X's dtype (at opset 15 only).
EXPONENTS = [
    "square",
    "square, opset=15",
    "general",
    "general, opset=15",
    "same shape, opset=15",
]


class PowPerCall:
    """x ** y on 16, 256 and 4096 elements, for every dtype of X."""

    params = (POW_X_DTYPES, [16, 256, 4096], EXPONENTS)
    param_names = ("dtype", "n", "exponent")

    def setup(self, dtype_name, n, exponent):
        is_int = dtype(dtype_name).kind in "iu"
        rng = np.random.default_rng(0)
        self.x = random_array(rng, shape(n), dtype_name, (0.25, 4.0), (-1000, 1000))
        if exponent.startswith("same shape"):
            self.y = random_array(rng, shape(n), dtype_name, (-3.0, 3.0), (0, 4))
        else:
            value = {"square": 2.0, "general": 3.0 if is_int else 3.7}[exponent.split(",")[0]]
            self.y = int(value) if is_int else value
        self.opset = 15 if exponent.endswith("opset=15") else None
        self.time_pow(dtype_name, n, exponent)  # warm-up: compiles outside the timings
        self.time_numpy(dtype_name, n, exponent)

    def time_pow(self, dtype_name, n, exponent):
        pow(self.x, self.y, opset=self.opset)  # opset=None: the newest version, as with no keyword

    def time_numpy(self, dtype_name, n, exponent):
        self.x**self.y


#: Small products: a 4x4 float32, a vector times a float32 matrix, an 8x8 int32.
PRODUCTS = {
    "float32 (4,4)@(4,4)": ("float32", (4, 4), (4, 4)),
    "float32 (1,64)@(64,64)": ("float32", (1, 64), (64, 64)),
    "int32 (8,8)@(8,8)": ("int32", (8, 8), (8, 8)),
}


class MatMulPerCall:
    """Small products, with and without an explicit ``opset=13``."""

    params = (list(PRODUCTS), [None, 13])
    param_names = ("product", "opset")

    def setup(self, product, opset):
        dtype_name, a_dims, b_dims = PRODUCTS[product]
        rng = np.random.default_rng(0)
        self.a = random_array(rng, shape(*a_dims), dtype_name)
        self.b = random_array(rng, shape(*b_dims), dtype_name)
        self.time_matmul(product, opset)
        self.time_numpy(product, opset)

    def time_matmul(self, product, opset):
        matmul(self.a, self.b, opset=opset)

    def time_numpy(self, product, opset):
        self.a @ self.b


RUNTIMES = [
    "numba_onnx_ops Backend",
    "onnx ReferenceEvaluator new_ops=OPS",
    "onnx ReferenceEvaluator",
    "onnxruntime",
]


class ModelMatMulPowMatMul:
    """A float32 model, ``((x @ w1) ** 2) @ w2`` on a (batch, width) input with (width, width)
    weights, run by our Backend, by onnx's evaluator with and without our MatMul and Pow, and
    by onnxruntime (CPU provider, as many threads as numba).  The model is the peer
    comparison's (``numba_onnx_ops.bench.cases.chain_model``); a runtime that is not installed
    is skipped."""

    params = (["1x64", "32x256"], RUNTIMES)
    param_names = ("batch x width", "runtime")

    def setup(self, size, runtime):
        try:
            from onnx.reference import ReferenceEvaluator

            from numba_onnx_ops.backend import Backend
            from numba_onnx_ops.bench.cases import chain_model
            from numba_onnx_ops.bench.contenders import ort_session
            from numba_onnx_ops.reference import OPS
        except ImportError as exc:
            raise NotImplementedError(f"not installed: {exc.name}") from None  # asv: skip
        batch, width = shape(*map(int, size.split("x")))
        rng = np.random.default_rng(0)
        x = random_array(rng, (batch, width), "float32")
        model = chain_model(random_array(rng, (2, width, width), "float32"), 2.0)
        if runtime == "numba_onnx_ops Backend":
            rep = Backend.prepare(model)
            self.run = lambda: rep.run([x])
        elif runtime == "onnxruntime":
            try:
                session = ort_session(model)
            except ImportError:
                raise NotImplementedError("onnxruntime is not installed") from None
            self.run = lambda: session.run(None, {"x": x})
        else:
            new_ops = OPS if "new_ops" in runtime else None
            evaluator = ReferenceEvaluator(model, new_ops=new_ops)
            self.run = lambda: evaluator.run(None, {"x": x})
        self.run()

    def time_run(self, size, runtime):
        self.run()
