"""Per-call cost on small tensors, a model through the ONNX integrations, and the crossovers
between the calling thread and the pool.

At these sizes the kernels take little of the time: the front layer (checks, dispatch,
allocation, a launch) and, for a model, the runtime's own work per node take the rest.  numpy's
time for the same call is the same-run peer (``time_numpy*``), onnxruntime the model's.  Every
class warms up in ``setup``, so no time holds a compilation.

``PowHereOrPool`` and ``MatMulHereOrPool`` time one call forced onto the calling thread and onto
the pool, side by side: where the two cross is the size up to which ``numba_onnx_ops.tuning``
keeps a call on the calling thread; ``MatMulOwnPoolOrLayer`` times products on the own pool and
on numba's threading layer.  They change ``tuning`` and clear the call plans
(``numba_onnx_ops.core.plans``), the package's internals, and skip where those are missing.
"""

from __future__ import annotations

import sys

import numpy as np

from numba_onnx_ops import matmul, pow  # noqa: A004 - the ONNX operator's name

from .common import POW_X_DTYPES, ForcedTuning, dtype, random_array, shape

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


#: A float32 64x64x64 product of operands in place: contiguous, a slice of a wider matrix, the
#: transpose of a contiguous one (F-contiguous).  A plan decides per layout how to read each
#: operand's memory, so an operand that is not C-contiguous costs a few microseconds a call, not
#: a second pass over its layout.
OPERAND_LAYOUTS = ["C-contiguous", "A a slice", "A transposed", "B a slice"]


class MatMulOperandLayout:
    """A small product whose operands are read in place in other layouts, beside numpy's."""

    params = (OPERAND_LAYOUTS,)
    param_names = ("layout",)

    def setup(self, layout):
        rng = np.random.default_rng(0)
        wide = rng.standard_normal((64, 96)).astype(np.float32)
        self.a = np.ascontiguousarray(wide[:, :64])
        self.b = rng.standard_normal((64, 64)).astype(np.float32)
        if layout == "A a slice":
            self.a = wide[:, :64]
        elif layout == "A transposed":
            self.a = np.ascontiguousarray(self.a.T).T
        elif layout == "B a slice":
            self.b = wide[:, 16:80]
        self.time_matmul(layout)
        self.time_numpy(layout)

    def time_matmul(self, layout):
        matmul(self.a, self.b)

    def time_numpy(self, layout):
        self.a @ self.b


class PowOperandLayout:
    """``x ** 2`` and ``x ** 3.7`` of a float32 64x64 base in place: contiguous, a slice of a
    wider matrix, a transpose; beside numpy's."""

    params = (["C-contiguous", "a slice", "transposed"], [2.0, 3.7])
    param_names = ("layout", "exponent")

    def setup(self, layout, exponent):
        rng = np.random.default_rng(0)
        wide = (rng.random((64, 96)) + 0.5).astype(np.float32)
        self.x = {
            "C-contiguous": np.ascontiguousarray(wide[:, :64]),
            "a slice": wide[:, :64],
            "transposed": np.ascontiguousarray(wide[:, :64].T).T,
        }[layout]
        self.time_pow(layout, exponent)
        self.time_numpy(layout, exponent)

    def time_pow(self, layout, exponent):
        pow(self.x, exponent)

    def time_numpy(self, layout, exponent):
        self.x**exponent


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
    is skipped.  From 1x64 (the runtime's own cost per node) to 1024x1024 (two products of a
    billion multiply-adds each: the kernels')."""

    params = (["1x64", "32x256", "1024x1024"], RUNTIMES)
    param_names = ("batch x width", "runtime")
    timeout = 300  # at 1024x1024 a run takes tens of milliseconds, the setup a second

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


WHERE = ["calling thread", "pool"]
_ANYWHERE = sys.maxsize  # a size limit no call reaches


class _HereOrPool(ForcedTuning):
    """Forces a call onto the calling thread or the pool (``ForcedTuning``)."""


#: Pow calls around their crossovers: the dtype of X and the exponent (a Python number).
#: float32 ** 3.7 is of the GENERAL class, the others of the cheaper ones (square, cube).
POW_CALLS = {
    "float32 ** 3.7": ("float32", 3.7),
    "float32 ** 2.0": ("float32", 2.0),
    "int32 ** 3": ("int32", 3),
    "float16 ** 3.7": ("float16", 3.7),
}


class PowHereOrPool(_HereOrPool):
    """The crossover of Pow between the calling thread and the pool: ``x ** y`` on n elements
    forced onto a serial kernel on the calling thread (``tuning.POW_HERE_MAX`` past any size)
    and onto a ``parallel=True`` kernel on every thread (``POW_HERE_MAX`` 0), side by side.

    A launch on the pool costs microseconds, more than the whole work of a small call;
    the size at which the pool's time falls below the calling thread's, per exponent class, is
    what ``tuning.POW_HERE_MAX`` holds: ``"general"`` from float32 ** 3.7 (GENERAL costs
    several times the other classes per element, so the pool pays back sooner), ``"other"``
    from float32 ** 2.0 and int32 ** 3.  A calling thread's kernel takes at most one chunk
    (``ops.pow.kernels.CHUNK``, 16384 elements), the largest n here.  float16 ** 3.7 runs with
    the half-type tables off (``tuning.TABLE_USE_MIN`` past any size): the direct kernel, which
    a call below ``TABLE_USE_MIN`` elements or before its table is built runs (a table's
    lookups always run on the pool)."""

    params = (list(POW_CALLS), [256, 1024, 2048, 4096, 8192, 16384], WHERE)
    param_names = ("call", "n", "where")

    def setup(self, call, n, where):
        dtype_name, exponent = POW_CALLS[call]
        limit = _ANYWHERE if where == "calling thread" else 0
        values = {"POW_HERE_MAX": {"general": limit, "other": limit}}
        if dtype(dtype_name).itemsize == 2:
            values["TABLE_USE_MIN"] = _ANYWHERE
        self.force(**values)
        rng = np.random.default_rng(0)
        self.x = random_array(rng, shape(n), dtype_name, (0.25, 4.0), (-1000, 1000))
        self.y = exponent
        self.time_pow(call, n, where)  # warm-up: compiles outside the timings

    def time_pow(self, call, n, where):
        pow(self.x, self.y)


#: Products of the own kernels around their crossover, by their multiply-adds in all: int32
#: squares (n**3: 512 to 262,144) and float16 batches of 8x8 matrices (512 a matrix: 4,096 to
#: 262,144).  (float32 batches this small go to numpy's BLAS, whatever the tuning here.)
MATMUL_CALLS = {
    **{f"int32 ({n},{n})@({n},{n})": ("int32", (n, n)) for n in (8, 16, 32, 64, 80, 96, 128)},
    **{f"int64 ({n},{n})@({n},{n})": ("int64", (n, n)) for n in (16, 32, 48, 64, 96)},
    **{
        f"float16 ({b},8,8)@({b},8,8)": ("float16", (b, 8, 8))
        for b in (8, 64, 256, 512, 1024, 2048)
    },
}


class MatMulHereOrPool(_HereOrPool):
    """The crossover of MatMul's own kernels between the calling thread and the pool: a
    product forced onto its kernel's serial twin on the calling thread
    (``tuning.MATMUL_HERE_MAX`` past any size) and onto the kernel on the pool
    (``MATMUL_HERE_MAX`` 0), side by side.

    The number of multiply-adds in all (batch x m x n x k) at which the pool's time falls below
    the calling thread's is what ``tuning.MATMUL_HERE_MAX`` holds (``MATMUL_HERE_MAX_INT64``
    from the int64 rows): up to it, a launch costs more than the second thread saves.  float32
    and float64 products that numpy's BLAS takes are not affected."""

    params = (list(MATMUL_CALLS), WHERE)
    param_names = ("product", "where")

    def setup(self, product, where):
        dtype_name, dims = MATMUL_CALLS[product]
        limit = _ANYWHERE if where == "calling thread" else 0
        self.force(MATMUL_HERE_MAX=limit, MATMUL_HERE_MAX_INT64=limit)
        rng = np.random.default_rng(0)
        self.a = random_array(rng, shape(*dims), dtype_name)
        self.b = random_array(rng, shape(*dims), dtype_name)
        self.time_matmul(product, where)  # warm-up: compiles outside the timings

    def time_matmul(self, product, where):
        matmul(self.a, self.b)


#: Products the pool takes, from the smallest it takes on 2 threads to the mid sizes.
POOL_CALLS = {
    "float32 (64,128)@(128,64)": ("float32", (64, 128), (128, 64)),
    "float32 (32,256)@(256,256)": ("float32", (32, 256), (256, 256)),
    "float32 (8,1024)@(1024,1024)": ("float32", (8, 1024), (1024, 1024)),
    "float32 (128,512)@(512,512)": ("float32", (128, 512), (512, 512)),
    "float64 (32,256)@(256,256)": ("float64", (32, 256), (256, 256)),
    "int32 (128,128)@(128,128)": ("int32", (128, 128), (128, 128)),
}
POOLS = ["own pool", "numba's layer"]


class MatMulOwnPoolOrLayer(ForcedTuning):
    """Products on the pool, on the package's own worker threads (``tuning.OWN_POOL``) and on
    numba's threading layer, side by side: the price of the layer's launch on products of
    microseconds to a millisecond.  Both sides keep every product on the pool
    (``MATMUL_HERE_MAX`` 0); the threads are those the run allows (``numba.set_num_threads``).
    Where the own pool is not available (other than Linux x86-64) both sides are the layer."""

    params = (list(POOL_CALLS), POOLS)
    param_names = ("product", "pool")

    def setup(self, product, where):
        dtype_name, sa, sb = POOL_CALLS[product]
        own = where == "own pool"
        self.force(OWN_POOL=own, MATMUL_HERE_MAX=0, MATMUL_HERE_MAX_INT64=0)
        rng = np.random.default_rng(0)
        self.a = random_array(rng, shape(*sa), dtype_name)
        self.b = random_array(rng, shape(*sb), dtype_name)
        self.time_matmul(product, where)  # warm-up: compiles outside the timings

    def time_matmul(self, product, where):
        matmul(self.a, self.b)


class PowInNjitLoop:
    """x ** 3.7 on 16 float32 elements, 1000 times in a user's ``@njit`` loop: ``pow`` through
    its numba overload (no Python between calls, the calling thread's kernels) against the same
    loop with numpy's ``x ** 3.7`` as numba compiles it (``time_numpy``).  Both loops are
    compiled in ``setup``."""

    params = ([16],)
    param_names = ("size",)

    def setup(self, size):
        import numba

        @numba.njit
        def ours(x, n):
            total = 0.0
            for _ in range(n):
                total += pow(x, 3.7)[0]
            return total

        @numba.njit
        def numpy_power(x, n):
            total = 0.0
            for _ in range(n):
                total += (x**3.7)[0]
            return total

        self.x = (np.random.default_rng(0).random(size) + 0.5).astype(np.float32)
        self.ours, self.numpy_power = ours, numpy_power
        ours(self.x, 1)
        numpy_power(self.x, 1)

    def time_pow(self, size):
        self.ours(self.x, 1000)

    def time_numpy(self, size):
        self.numpy_power(self.x, 1000)
