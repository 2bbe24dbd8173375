"""Ahead-of-use compilation and a count of what has been compiled."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .core.versions import public_table
from .ops.matmul.api import matmul
from .ops.pow.api import pow  # noqa: A004

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

# Shapes that walk every dispatch path, on the calling thread and on the pool: tiny,
# batched, odd sizes past the block edges, matrix-vector products (small and large), batches
# of 8, 16 and 64 columns with enough work for the vector micro-kernel (one of each of its
# block widths), one column strip on the pool whose rows group in fours (``own.grouped_tile``),
# rows of its widest block on the calling thread, and a product large enough for the half
# types' own paths (sgemm panels, bfloat16 pairs); for Pow, every exponent class and
# broadcast pattern, on a base small enough for the calling thread's kernels and on one large
# enough for the pool's.
_MATMUL_CASES = [((4, 4), (4, 4)), ((3, 8, 8), (3, 8, 8)), ((70, 130), (130, 90)),
                 ((2, 1, 33, 17), (3, 17, 5)), ((64,), (64, 64)), ((64, 64), (64,)),
                 ((512,), (512, 512)), ((512, 512), (512,)),
                 ((2048, 8, 8), (2048, 8, 8)), ((256, 16, 16), (256, 16, 16)),
                 ((16, 64, 64), (16, 64, 64)), ((64, 40), (40, 64)),
                 ((200, 192), (192, 200)), ((9, 50), (50, 70))]  # fmt: skip
# and by a transposed B (a linear layer's weights, ``x @ W.T``), of one row, whose kernel is
# its own (several rows take the kernels above)
_MATMUL_TRANSPOSED_CASES = [((64,), (64, 64)), ((512,), (512, 512))]
# and of a transposed A (``A.T @ B``), whose rows a kernel copies out first, on the calling
# thread and on the pool
_MATMUL_TRANSPOSED_A_CASES = [((130, 70), (130, 90)), ((600, 600), (600, 8))]
_POW_EXPONENTS = [2, 3, 0.5, -1, -0.5, 5, 3.7]
_POW_SHAPES = [(8, 40), (8, 4000)]


def warmup(
    dtypes: DTypeLike | Iterable[DTypeLike] | None = None, *, verbose: bool = False
) -> dict[str, float]:
    """Compile the kernels for ``dtypes`` now instead of at their first use.

    Compiled code goes to numba's on-disk cache (next to the package, or under
    ``NUMBA_CACHE_DIR``), so a warm-up in one process also speeds up later processes.

    Parameters
    ----------
    dtypes : dtype-like or iterable of dtype-like, optional
        Base dtypes to prepare (MatMul operands, Pow's ``X``): one (``"float32"``,
        ``np.float32``) or several; default: every dtype either operator allows.  Pow is
        prepared for exponents of the same dtype and for Python ``int``/``float`` exponents
        (int64/float64).
    verbose : bool
        Print each dtype's compile time as it finishes.

    Returns
    -------
    dict
        Seconds spent per dtype name.

    Raises
    ------
    TypeError
        A value that is not a dtype (``"nonsense"``, ``object()``), or a dtype neither
        operator allows (``int8``); raised before anything compiles.
    """
    matmul_table, pow_table = public_table("MATMUL_TYPES"), public_table("POW_TYPES")
    matmul_types = matmul_table[max(matmul_table)]
    pow_types = pow_table[max(pow_table)][0]
    if dtypes is None:
        dtypes = sorted(matmul_types | pow_types, key=str)
    dtypes = _dtype_list(dtypes)
    for dtype in dtypes:  # (all checked first: a mistake should not cost minutes of compiling)
        if dtype not in matmul_types | pow_types:
            raise TypeError(f"warmup: {dtype} is not a dtype of MatMul or Pow")
    seconds = {}
    rng = np.random.default_rng(0)
    for dtype in dtypes:
        start = time.perf_counter()
        if dtype in matmul_types:
            for sa, sb in _MATMUL_CASES:
                matmul(np.ones(sa, dtype), np.ones(sb, dtype))
            for sa, sb in _MATMUL_TRANSPOSED_CASES:
                matmul(np.ones(sa, dtype), np.ones(sb[::-1], dtype).T)
            for sa, sb in _MATMUL_TRANSPOSED_A_CASES:
                matmul(np.ones(sa, dtype).T, np.ones(sb, dtype))
        for shape in _POW_SHAPES if dtype in pow_types else ():
            x = np.abs(rng.standard_normal(shape)).astype(dtype)
            if dtype.kind != "u":  # a negative base: the kernels that fix signs compile too
                x[0, 0] = -x[0, 0]
            if dtype.kind not in "iu":  # zero and NaN bases: the fix-up passes compile too
                x[0, 1:3] = [0.0, np.nan]
            for e in _POW_EXPONENTS:
                if dtype.kind in "iu" and e != int(e):
                    continue
                pow(x, e)
                pow(x, np.asarray(e, dtype))
            pow(x, x)
            pow(x, x[0])
            pow(x[:, :1], x[0])
        seconds[str(dtype)] = time.perf_counter() - start
        if verbose:
            print(f"warmup {dtype}: {seconds[str(dtype)]:.2f} s", file=sys.stderr)
    return seconds


def _dtype_list(dtypes) -> list[np.dtype]:
    """One dtype-like or an iterable of them, as dtypes; ``TypeError`` for anything else."""
    if isinstance(dtypes, (str, type, np.dtype)) or not isinstance(dtypes, Iterable):
        dtypes = [dtypes]
    result = []
    for d in dtypes:
        try:
            result.append(np.dtype(d))
        except TypeError:
            raise TypeError(
                f"warmup: dtypes must be a dtype (such as 'float32' or numpy.float32) or a "
                f"list of them, got {d!r}"
            ) from None
    return result


def compiled_specializations() -> dict[str, int]:
    """Signatures compiled (or loaded from cache) so far, per numba function of this package.

    Keys are ``module.function``; the kernels the front layers launch (with their serial twins,
    ``module.function_here``, and their twins on the own pool, ``module.function_tasks``) and
    the ``@njit`` helpers they call are all listed (a helper gets a signature per caller type).
    """
    from numba.extending import is_jitted

    from .runtime.jit import serial_twins
    from .runtime.pool import task_twins

    found = [*serial_twins(), *task_twins()]
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(__package__ + "."):
            continue
        found.extend(value for value in vars(module).values() if is_jitted(value))
    kernels = {}
    for value in found:
        func = value.py_func
        if value.signatures and func.__module__.startswith(__package__ + "."):
            kernels[f"{func.__module__}.{func.__qualname__}"] = len(value.signatures)
    return kernels
