"""MatMul benchmarks: square, batched, matrix-vector and tiny products over every dtype.

Every class warms up in ``setup`` (the first call compiles), so ``time_*`` results hold no
compile time; ``Compile`` in compile.py measures that separately.  MatMul's opset does not appear
as a parameter: versions 1, 9 and 13 differ only in the dtypes they accept, not in the kernels.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from numba_onnx_ops import matmul

from . import common
from .common import (
    MATMUL_DTYPES,
    ForcedTuning,
    dtype,
    random_array,
    seconds_per_call,
    shape,
)


def _operands(dtype: str, a_dims, b_dims) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return random_array(rng, shape(*a_dims), dtype), random_array(rng, shape(*b_dims), dtype)


def _gflops(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> float:
    """GFLOP/s of ``matmul(a, b)`` (whose result is shaped as ``out``): multiply-adds, output
    elements times the inner dimension, counted as two operations each."""
    return 2 * out.size * a.shape[-1] / seconds_per_call(lambda: matmul(a, b)) / 1e9


class MatMulSquare:
    """n x n @ n x n: the blocked kernel, and BLAS where the dispatch picks it (float32/64)."""

    params = (MATMUL_DTYPES, [256, 512, 1024])
    param_names = ("dtype", "n")
    timeout = 300

    def setup(self, dtype, n):
        self.a, self.b = _operands(dtype, (n, n), (n, n))
        self.out = matmul(self.a, self.b)  # warm-up: compiles outside the timings

    def time_matmul(self, dtype, n):
        matmul(self.a, self.b)

    def track_gflops(self, dtype, n):
        """Throughput in GFLOP/s (integer multiply-adds counted as two operations too)."""
        return _gflops(self.a, self.b, self.out)

    track_gflops.unit = "GFLOP/s"


# The dispatch's crossovers (numba_onnx_ops/tuning.py) as measured with these
# classes and the peer comparison's timing, idle, on 2 Zen 3 cores (2026-11), numpy's time /
# the own kernel's for float32/float64: every 2-D product 0.08 at 32^3, 0.5 at 256^3, 0.47 at
# 512^3; batches 64 x 8^3 0.37, 64 x 64^3 0.9, 64 x 128x64x128 0.56, 64 x 256^3 broadcast 0.7;
# long batches of small float32 matrices 1024 x 8^3 1.9, 1024 x 16^3 1.4, 1024 x 32^3 1.9,
# 1024 x 48^3 1.5 (512 x 24^3 even); float64 4096 x 16^3 1.3, 1024 x 32^3 0.9.  Half types,
# sgemm on float32 panels' time / the own kernel's (float16 and bfloat16): 2-D 128^3 0.95 and
# 1.35, 256^3 0.58 and 0.67, 512^3 0.53 and 0.54; a batch of 16 128^3 products 1.3 and 2.0.
#
# The vector micro-kernel's crossovers (2026-12, Zen 4, machine shared and loaded, so measured
# on one thread each, NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1, in thread CPU time; numpy's
# time / the own call's, float32 batches of squares).  AVX-512: 32 x 32^3 0.59, 8 x 64^3 0.71,
# 32 x 64^3 0.88, 2 x 128^3 0.95, 8 x 128^3 1.08, 2 x 256^3 1.05; the own call costs about
# 15 us more (its launch and front), the rest halves on two threads, while numpy runs such
# small products on one: the crossover is near 2^21 multiply-adds in all.  AVX2 code
# (NUMBA_CPU_NAME=znver3 with AVX2/FMA features, OPENBLAS_CORETYPE=Haswell, same core):
# 32 x 32^3 0.74, 8 x 64^3 0.82, 2 x 128^3 0.83; (8,1,256,256)@(1,8,256,256) own 87 GFLOP/s,
# OpenBLAS 96 (so 256^3 products stay on BLAS there); 4096 x 8^3 3.2, 2048 x 16^3 1.9.
# AVX-512 again (2026-12, one thread each, thread CPU time): 64 x 128x64x128 1.17, 32 x 128^3
# 1.16, 4 x 256^3 1.09, 64 x 64^3 0.97.  Once the kernels' caller yielded to a pool thread
# queued behind it, the second core no longer started late after a pause, and on two threads
# in the peer comparison's pattern such batches up to 256^3 went to the micro-kernel: on
# AVX-512 (Zen 4, 2 vCPUs), samples as the peer comparison takes them (a 50 ms pause, then 5 ms
# of calls; medians of 11, numpy's time / the own kernel's): 16 x 64^3 1.20, 128 x 64^3 1.62,
# 64 x 128x64x128 1.50, 4 x 128^3 0.93, 16 x 128^3 1.29, 2 x 256^3 1.09, 4 x 256^3 1.63,
# 8 x 256^3 1.41, 16 x 256^3 0.98, 8 x 8 broadcast 256^3 1.11, 2 x 384^3 0.93, 4 x 384^3 1.19;
# single runs vary by 30%.  The own call's launch and front cost about 15 us.
#
# Whole-matrix code for tiny products (``tuning.WHOLE_MAX_M``/``WHOLE_MAX_K``), against the
# blocked micro-kernel.  Zen 4, 4096 or 2048 products, whole / blocked (the whole kernel with
# A's column stride a variable, before it became the constant 1): float32 4x8x8 57 / 122 us,
# 16x8x8 173 / 238, float64 4x4x4 43 / 89, 8x8x8 102 / 126 on one core; but with K = 16 the
# blocks were as fast or faster: float32 16x16x16 231 / 206, 8x16x16 135 / 106, float64
# 16x16x16 358 / 357.  With AVX2 (16 registers) the whole code takes up to 32 terms, its rows in
# groups whose sums fit the registers (6 rows of two vectors): Zen 3, 2 threads, one process,
# medians of 31 in shuffled order, whole / blocked (us): float32 2048 x 16x16x16 215 / 256,
# 4096 x 8x8x8 131 / 175, 4096 x 8x16x8 159 / 199, 1024 x 16x32x16 280 / 322, 1024 x 8x32x16
# 148 / 184; float64 2048 x 16x16x8 476 / 508, 1024 x 16x32x8 298 / 338; K = 64: 223 / 221.
#
# bfloat16 pair dot products (``tuning.PAIRS_MIN_MNK``/``PAIRS_MIN_N``), Zen 4, 2 threads,
# medians, against the paths they replace: 256^3 0.25 vs 0.28 ms and 512^3 1.45 vs 1.50 back to
# back, 1024^3 6-7 vs 14-15 with pauses between calls; 16 columns (one vector a row block:
# loads, not dot products, bound it) 726 vs 449 us.  Since the pairs decide once per call kind,
# pack a batch in one launch and run small products on the calling thread (medians of 31, one
# process, pairs vs the widening kernels): 2 threads, 64^3 13.0 vs 20.3 us, 128^3 32.5 vs 97.4,
# (8,128,128)^2 170 vs 239, 32x256x256 34.8 vs 89.3; 1 thread, 16x64x64 10.6 vs 8.0, 32x64x64
# 11.8 vs 11.8, 64x32x64 11.7 vs 12.6, 8x128x128 12.3 vs 12.8: the pairs from 2^18.
#
# Half types in ``matmul_direct`` widen A at every use: past ``tuning.DIRECT_HALF_MAX_MNK`` the
# packed kernel, which widens each element once, ran 65 against 38 GFLOP/s per core at 1024^3.

#: Batched products: many tiny matrices (a path without per-matrix overhead), mid-size batches,
#: and batch dimensions that broadcast against each other.
BATCHED = {
    "(4096,8,8)@(4096,8,8)": ((4096, 8, 8), (4096, 8, 8)),
    "(1024,16,16)@(1024,16,16)": ((1024, 16, 16), (1024, 16, 16)),
    "(2048,16,16)@(2048,16,16)": ((2048, 16, 16), (2048, 16, 16)),
    "(64,128,64)@(64,64,128)": ((64, 128, 64), (64, 64, 128)),
    "(8,1,256,256)@(1,8,256,256)": ((8, 1, 256, 256), (1, 8, 256, 256)),
}


class MatMulBatched:
    """Stacks of products with batch dimensions, broadcast or not."""

    params = (MATMUL_DTYPES, list(BATCHED))
    param_names = ("dtype", "shapes")
    timeout = 300

    def setup(self, dtype, shapes):
        self.a, self.b = _operands(dtype, *BATCHED[shapes])
        self.out = matmul(self.a, self.b)

    def time_matmul(self, dtype, shapes):
        matmul(self.a, self.b)

    def track_gflops(self, dtype, shapes):
        return _gflops(self.a, self.b, self.out)

    track_gflops.unit = "GFLOP/s"


#: Products around the crossover of B's strips packed by the tasks (``tuning.PACK_MIN_ROWS``,
#: ``PACK_MIN_SPAN``): widths a power of two (and 3 x 1024) apart, where a strip read in place
#: misses L2, one not, and few rows against many.
PACKED_B = {
    "256^3": ((256, 256), (256, 256)),
    "128x512x512": ((128, 512), (512, 512)),
    "32x1024x1024": ((32, 1024), (1024, 1024)),
    "16x3072x768": ((16, 3072), (3072, 768)),
    "512^3": ((512, 512), (512, 512)),
    "1000^3": ((1000, 1000), (1000, 1000)),
    "1024^3": ((1024, 1024), (1024, 1024)),
    "512x768x3072": ((512, 768), (768, 3072)),
    "2048^3": ((2048, 2048), (2048, 2048)),
}


class MatMulPackedB(ForcedTuning):
    """float32 and float64 products on the vector micro-kernel with B's strips read in place
    (``tuning.PACK_MIN_ROWS`` past any size) and copied by the tasks (``PACK_MIN_ROWS`` 1,
    ``PACK_MIN_SPAN`` 0), side by side: where copying pays is what the two values hold."""

    params = (["float32", "float64"], list(PACKED_B), ["in place", "packed"])
    param_names = ("dtype", "shapes", "b")
    timeout = 300

    def setup(self, dtype_name, shapes, b):
        if b == "in place":
            self.force(PACK_MIN_ROWS=sys.maxsize)
        else:
            self.force(PACK_MIN_ROWS=1, PACK_MIN_SPAN=0)
        self.a, self.b = _operands(dtype_name, *PACKED_B[shapes])
        self.out = matmul(self.a, self.b)  # warm-up: compiles outside the timings

    def time_matmul(self, dtype_name, shapes, b):
        matmul(self.a, self.b)

    def track_gflops(self, dtype_name, shapes, b):
        return _gflops(self.a, self.b, self.out)

    track_gflops.unit = "GFLOP/s"


#: float32 products of few rows (``tuning.FEW_ROWS_MAX``): B streamed from memory (1024 x 1024,
#: 3072 x 768) or from cache (256 x 256, 512 x 512), rows that fill blocks of four and of six.
FEW_ROWS = {
    f"{m}x{k}x{n}": ((m, k), (k, n))
    for m, k, n in [(2, 1024, 1024), (4, 1024, 1024), (8, 1024, 1024), (12, 1024, 1024),
                    (16, 1024, 1024), (16, 3072, 768), (8, 256, 256), (16, 512, 512)]
}  # fmt: skip


class MatMulFewRows(ForcedTuning):
    """float32 products of few rows on the vector micro-kernel, in blocks of six rows by two
    vectors (``tuning.FEW_ROWS_MAX`` 0) and where it applies (AVX2) of four rows by three
    (``FEW_ROWS_MAX`` as tuned), side by side."""

    params = (list(FEW_ROWS), ["6x2", "tuned"])
    param_names = ("shapes", "blocks")

    def setup(self, shapes, blocks):
        if blocks == "6x2":
            self.force(FEW_ROWS_MAX=0)
        else:
            self.force()
        self.a, self.b = _operands("float32", *FEW_ROWS[shapes])
        self.out = matmul(self.a, self.b)  # warm-up: compiles outside the timings

    def time_matmul(self, shapes, blocks):
        matmul(self.a, self.b)


#: Mid-size half products, past the direct kernel's multiply-adds and short of the panels'.
HALF_MID = {
    f"{m}x{k}x{n}": ((m, k), (k, n))
    for m, k, n in [(32, 256, 256), (64, 128, 64), (128, 128, 128), (8, 256, 256), (4, 512, 512)]
} | {
    f"{b}x{m}x{k}x{n}": ((b, m, k), (b, k, n))
    for b, m, k, n in [(2, 128, 64, 128), (4, 32, 256, 256)]
}  # fmt: skip


class MatMulHalfWidened(ForcedTuning):
    """float16 and bfloat16 products of mid size on the packed kernel, which widens as it packs
    (``tuning.HALF_WIDEN_MIN_ROWS`` past any row count), and as tuned: widened to float32 whole
    on the calling thread, the float32 plan, narrowed (``half_panels.widened_plan``), side by
    side, alone and in batches.  (4x512x512 has fewer rows than the tuned value: the packed
    kernel either way.)"""

    params = (["float16", "bfloat16"], list(HALF_MID), ["packed", "tuned"])
    param_names = ("dtype", "shapes", "path")

    def setup(self, dtype, shapes, path):
        if path == "packed":
            self.force(HALF_WIDEN_MIN_ROWS=1 << 62)
        else:
            self.force()
        self.a, self.b = _operands(dtype, *HALF_MID[shapes])
        self.out = matmul(self.a, self.b)  # warm-up: compiles outside the timings

    def time_matmul(self, dtype, shapes, path):
        matmul(self.a, self.b)


#: Matrix-vector and vector-matrix products: bandwidth-bound, one pass over the matrix.
VECTOR = {
    "(4096,4096)@(4096,)": ((4096, 4096), (4096,)),
    "(1,4096)@(4096,4096)": ((1, 4096), (4096, 4096)),
    "(4096,)@(4096,4096)": ((4096,), (4096, 4096)),
}


class MatMulVector:
    """Matrix-vector and vector-matrix products, 1-D operands and a 1-row matrix."""

    params = (MATMUL_DTYPES, list(VECTOR))
    param_names = ("dtype", "shapes")
    timeout = 300

    def setup(self, dtype, shapes):
        self.a, self.b = _operands(dtype, *VECTOR[shapes])
        self.out = matmul(self.a, self.b)

    def time_matmul(self, dtype, shapes):
        matmul(self.a, self.b)

    def track_gbps(self, dtype, shapes):
        """Memory throughput in GB/s: bytes of both operands and the result over the time."""
        moved = self.a.nbytes + self.b.nbytes + self.out.nbytes
        return moved / seconds_per_call(lambda: matmul(self.a, self.b)) / 1e9

    track_gbps.unit = "GB/s"


class MatMulRowPlacement:
    """A single row of A, float32 (1,768) @ (768,3072) (B of 9.4 MB, from L3), with B starting
    at ``offset`` bytes into a page.  A load from B that matches a recent store of the sums in
    an address's low 12 bits waits on it, so the kernel places its sums half a page from B's
    band: the offsets should time alike (the sums placed by the allocator, one placement of B
    in 32 took 40% longer than the others)."""

    params = [[0, 64, 1024, 2048, 3072, 4032]]
    param_names = ("offset",)

    def setup(self, offset):
        rng = np.random.default_rng(0)
        self.a = random_array(rng, (1, 768), "float32")
        b = random_array(rng, (768, 3072), "float32")
        room = np.empty(b.nbytes + 4096, np.uint8)
        start = (offset - room.ctypes.data) % 4096
        self.b = room[start : start + b.nbytes].view(np.float32).reshape(b.shape)
        self.b[...] = b
        matmul(self.a, self.b)

    def time_matmul(self, offset):
        matmul(self.a, self.b)


class MatMulSmall:
    """n x n @ n x n for tiny n: the cost of the front layer (validation, dispatch, allocation)."""

    params = (MATMUL_DTYPES, [2, 4, 8, 16])
    param_names = ("dtype", "n")

    def setup(self, dtype, n):
        self.a, self.b = _operands(dtype, (n, n), (n, n))
        self.out = matmul(self.a, self.b)

    def time_matmul(self, dtype, n):
        matmul(self.a, self.b)

    def time_matmul_out(self, dtype, n):
        """With a preallocated ``out=``: the front layer without the allocation."""
        matmul(self.a, self.b, out=self.out)


#: Batches of products by one B (a 2-D B broadcast): x of rank 3 @ W.
SHARED_B = {
    "(32,1,256)@(256,256)": ((32, 1, 256), (256, 256)),
    "(16,1,768)@(768,768)": ((16, 1, 768), (768, 768)),
    "(8,4,256)@(256,256)": ((8, 4, 256), (256, 256)),
}


class MatMulSharedB:
    """float32 batches whose B is one matrix for every entry, A's matrices one after another:
    one product of all the rows (``own.stacked_rows``), beside numpy's."""

    params = (list(SHARED_B),)
    param_names = ("shapes",)

    def setup(self, shapes):
        self.a, self.b = _operands("float32", *SHARED_B[shapes])
        matmul(self.a, self.b)

    def time_matmul(self, shapes):
        matmul(self.a, self.b)

    def time_numpy(self, shapes):
        self.a @ self.b


#: Products of a transposed A, M x K x N for A.T @ B, A (K, M) C-contiguous.
TRANSPOSED_A = {"128x256x256": (128, 256, 256), "256x256x256": (256, 256, 256),
                "512x512x512": (512, 512, 512)}  # fmt: skip


class MatMulTransposedA:
    """float32 ``A.T @ B``, A's columns contiguous (A of unit row stride): its rows copied out
    first (``own._with_rows_of_a``), beside the same product with A C-contiguous and beside
    numpy's."""

    params = (list(TRANSPOSED_A),)
    param_names = ("shapes",)

    def setup(self, shapes):
        m, k, n = TRANSPOSED_A[shapes]
        a, self.b = _operands("float32", (k, m), (k, n))
        self.a = a.T
        self.a_rows = np.ascontiguousarray(self.a)
        matmul(self.a, self.b)
        matmul(self.a_rows, self.b)

    def time_matmul(self, shapes):
        matmul(self.a, self.b)

    def time_matmul_a_contiguous(self, shapes):
        matmul(self.a_rows, self.b)

    def time_numpy(self, shapes):
        self.a @ self.b


#: Products with a linear layer's weights, M x K x N for (M, K) @ W.T, W (N, K) C-contiguous.
TRANSPOSED_WEIGHTS = {
    "1x768x3072": (1, 768, 3072),
    "8x1024x1024": (8, 1024, 1024),
    "32x256x256": (32, 256, 256),
    "128x512x512": (128, 512, 512),
}


class MatMulTransposedWeights:
    """``x @ W.T``, W's rows contiguous (B of unit row stride, each column contiguous): the
    micro-kernel's tasks copy B's strips from its columns, beside the same product with B
    C-contiguous and beside numpy's."""

    params = (["float32", "float64"], list(TRANSPOSED_WEIGHTS))
    param_names = ("dtype", "shapes")

    def setup(self, dtype_name, shapes):
        m, k, n = TRANSPOSED_WEIGHTS[shapes]
        self.a, w = _operands(dtype_name, (m, k), (n, k))
        self.b = w.T
        self.b_rows = np.ascontiguousarray(self.b)
        matmul(self.a, self.b)
        matmul(self.a, self.b_rows)

    def time_matmul(self, dtype_name, shapes):
        matmul(self.a, self.b)

    def time_matmul_b_contiguous(self, dtype_name, shapes):
        matmul(self.a, self.b_rows)

    def time_numpy(self, dtype_name, shapes):
        self.a @ self.b


#: Products of inference, M x K x N for (M, K) @ (K, N), and a batch of 64 (128, 64) @ (64, 128)
#: products: the shapes of the peer comparison's GEMM group (``bench --cases gemm``).
INFERENCE = {
    "32x256x256": ((32, 256), (256, 256)),
    "64x128x64": ((64, 128), (128, 64)),
    "128x512x512": ((128, 512), (512, 512)),
    "8x1024x1024": ((8, 1024), (1024, 1024)),
    "256x256x256": ((256, 256), (256, 256)),
    "512x512x512": ((512, 512), (512, 512)),
    "1024x1024x1024": ((1024, 1024), (1024, 1024)),
    "64 x 128x64x128": ((64, 128, 64), (64, 64, 128)),
    "1x768x3072": ((1, 768), (768, 3072)),
    "16x3072x768": ((16, 3072), (3072, 768)),
}
FLOAT_DTYPES = [name for name in MATMUL_DTYPES if dtype(name).kind in "fV"]  # V: bfloat16
#: The contenders of the peer comparison (``numba_onnx_ops.bench.contenders``) that a GEMM
#: is to beat: numpy (OpenBLAS), onnxruntime (MLAS) and torch (MKL, oneDNN).
GEMM_CONTENDERS = ["numba_onnx_ops", "numpy", "onnxruntime", "torch"]


class MatMulInferenceShapes:
    """Float products of inference shapes on 1 and 2 threads, by each contender of the peer
    comparison, built by its own factories (``numba_onnx_ops.bench.contenders``): torch and
    onnxruntime where installed, skipped otherwise, as is a dtype a contender has no kernel for
    (onnxruntime's bfloat16).  ``threads`` holds numba's pool, onnxruntime's session, torch and
    numpy's BLAS (through threadpoolctl; without it, BLAS keeps ``OPENBLAS_NUM_THREADS``, which
    asv.conf.json pins to 2, and so do this library's products that go to it).  numpy's float16
    product is its scalar loop: seconds a call at 1024^3."""

    params = (list(INFERENCE), FLOAT_DTYPES, [1, 2], GEMM_CONTENDERS)
    param_names = ("shape", "dtype", "threads", "contender")
    timeout = 300

    def setup(self, shape_name, dtype_name, threads, contender):
        try:
            from numba_onnx_ops.bench.cases import Case
            from numba_onnx_ops.bench.contenders import (
                FACTORIES,
                Unavailable,
                contender_threads,
            )
        except ImportError as exc:
            raise NotImplementedError(f"no peer comparison here: {exc}") from None  # asv: skip
        if contender not in FACTORIES:
            raise NotImplementedError(f"no {contender} contender")
        self.a, self.b = _operands(dtype_name, *INFERENCE[shape_name])
        case = Case(shape_name, "MatMul", (dtype_name,) * 2, (self.a.shape, self.b.shape), 1.0)
        self.flop = case.flop()
        self._threads = contextlib.ExitStack()
        try:
            self._threads.enter_context(contender_threads(threads))
            self.call = FACTORIES[contender](case, self.a, self.b)
        except (ValueError, Unavailable) as exc:  # more threads than numba's pool; no kernel
            self._threads.close()
            raise NotImplementedError(str(exc)) from None
        self.call()  # warm-up: compiles, builds the session, wakes the thread pools

    def teardown(self, *params):
        self._threads.close()  # numba's and the BLAS's thread counts back

    # GFLOP/s alone, no time_ twin: the grid is large (each combination a fresh interpreter in
    # asv), and a GEMM is read by its rate against the FMA peak (FmaPeak).
    def track_gflops(self, shape_name, dtype_name, threads, contender):
        """Throughput in GFLOP/s, two operations per multiply-add."""
        return self.flop / seconds_per_call(self.call) / 1e9

    track_gflops.unit = "GFLOP/s"


class FmaPeak:
    """The float32 fused multiply-add peak of this machine on 1 and 2 threads (registers only,
    as ``bench`` measures it: ``numba_onnx_ops.bench.limits``): the bound that
    ``MatMulInferenceShapes.track_gflops`` is read against (float64 peaks at half of it)."""

    params = [1, 2]
    param_names = ("threads",)

    def setup(self, threads):
        try:
            import numba

            from numba_onnx_ops.bench.contenders import contender_threads
            from numba_onnx_ops.bench.limits import fma_peak
        except ImportError as exc:
            raise NotImplementedError(f"no machine limits here: {exc}") from None  # asv: skip
        if threads > numba.config.NUMBA_NUM_THREADS:
            raise NotImplementedError(f"{threads} threads: more than numba's pool")
        self.fma_peak, self.on_threads = fma_peak, contender_threads
        if self._peak(threads, seconds=1e-3, runs=1) is None:  # warm-up: compiles the chains
            raise NotImplementedError("no AVX2 and FMA here")

    def _peak(self, threads, seconds, runs):
        with self.on_threads(threads):
            return self.fma_peak(seconds=seconds, runs=runs)

    def track_gflops(self, threads):
        """GFLOP/s of float32 FMAs on ``threads`` threads, each on registers only."""
        seconds, runs = (1e-3, 1) if common.TINY else (0.05, 5)
        return self._peak(threads, seconds, runs)["gflops_all_threads"]

    track_gflops.unit = "GFLOP/s"
