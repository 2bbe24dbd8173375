"""The agreement check: every contender's result is compared with a reference before timing."""

from __future__ import annotations

import numpy as np

from ..core.dtypes import is_bfloat16
from .cases import Case, chain_model
from .exact import pow_int as _int_pow_reference
from .exact import ulp_distance as _ulp_distance

#: The agreement tolerance of Pow results in units in the last place of the output type.  The
#: library promises 1 ulp; peers such as onnxruntime's ``x*x*x`` in float32 come within 2.
POW_ULPS = 2.0


def check(case: Case, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> str | None:
    """``None`` when ``out`` agrees with the reference for ``case`` on inputs ``a``, ``b``;
    otherwise a short reason."""
    if case.op == "MatMul":
        return _check_matmul(a, b, out)
    if case.op == "Model":
        return _check_model(case, a, b, out)
    expected = np.broadcast_shapes(a.shape, b.shape)
    if out.shape != expected or out.dtype != a.dtype:
        return f"got {out.dtype} {out.shape}, expected {a.dtype} {expected}"
    return _check_pow(a, b, out)


def _check_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> str | None:
    # numpy's integer matmul is exact modulo 2**bits; floats are compared with a float64 product.
    exact = a.dtype.kind in "iu"
    a64, b64 = (a, b) if exact else (a.astype(np.float64), b.astype(np.float64))
    ref = np.matmul(a64, b64)
    if out.shape != ref.shape or out.dtype != a.dtype:
        return f"got {out.dtype} {out.shape}, expected {a.dtype} {ref.shape}"
    if exact:
        bad = np.count_nonzero(out != ref)
        return f"{bad} of {out.size} entries differ" if bad else None
    # Summation error of any order is at most K * eps * (|A| @ |B|); add one rounding to output.
    k = a.shape[-1]
    eps_acc = np.finfo(np.float64 if a.dtype == np.float64 else np.float32).eps
    bound = k * eps_acc * np.matmul(np.abs(a64), np.abs(b64)) + _eps(a.dtype) * np.abs(ref)
    return _beyond(out, ref, bound, "K*eps*(|A|@|B|)")


def _check_model(case: Case, x: np.ndarray, weights: np.ndarray, out: np.ndarray) -> str | None:
    """Compare with onnx's reference evaluator running the same model in float64 (whatever
    ran it in float32: our Backend, the evaluator with or without our operators, onnxruntime).

    Each MatMul within the bound above, K * eps * (|A| @ |B|), and ``h ** p`` adding ``p`` times
    its base's error and one rounding: in all (to first order, for p >= 1)
    ``((1 + p) * K + 1) * eps * M + eps * |ref|``, M the model's output on ``|x|`` and
    ``|weights|`` (every product and power of magnitudes, as ``|A| @ |B|`` for one MatMul).
    """
    from onnx.reference import ReferenceEvaluator

    def run(x64, w64):
        return ReferenceEvaluator(chain_model(w64, case.exponent)).run(None, {"x": x64})[0]

    x64, w64 = x.astype(np.float64), weights.astype(np.float64)
    ref = run(x64, w64)
    if out.shape != ref.shape or out.dtype != x.dtype:
        return f"got {out.dtype} {out.shape}, expected {x.dtype} {ref.shape}"
    eps = _eps(x.dtype)
    factor = (1 + case.exponent) * x.shape[-1] + 1
    bound = factor * eps * run(np.abs(x64), np.abs(w64)) + eps * np.abs(ref)
    return _beyond(out, ref, bound, "((1+p)K+1)*eps*M")


def _beyond(out: np.ndarray, ref: np.ndarray, bound: np.ndarray, name: str) -> str | None:
    """How many entries of ``out`` are further than ``bound`` from ``ref``, or ``None``."""
    err = np.abs(out.astype(np.float64) - ref)
    bad = np.count_nonzero(~(err <= bound))
    if bad:
        worst = float(np.max(err - bound))
        return f"{bad} of {out.size} entries beyond {name} (by up to {worst:.3g})"
    return None


def _check_pow(x: np.ndarray, y: np.ndarray, out: np.ndarray, samples: int = 100_000) -> str | None:
    """Compare a random sample of ``out`` with a reference: longdouble ``pow`` rounded to the
    output type for floats (within ``POW_ULPS``), exact integer powers with wraparound."""
    rng = np.random.default_rng(1)
    n = out.size
    flat = rng.choice(n, size=min(n, samples), replace=False) if n > samples else np.arange(n)
    index = np.unravel_index(flat, out.shape)
    xs = np.broadcast_to(x, out.shape)[index]
    ys = np.broadcast_to(y, out.shape)[index]
    got = out[index]
    if x.dtype.kind in "iu":
        ref = _int_pow_reference(xs, ys)
        bad = np.count_nonzero(got != ref)
        return f"{bad} of {got.size} sampled entries differ" if bad else None
    # NaN (a fractional power of a negative base) and infinity are results like any other here,
    # compared as such: numpy's floating-point warnings would only repeat them.
    with np.errstate(all="ignore"):
        ref = np.power(xs.astype(np.longdouble), ys.astype(np.float64).astype(np.longdouble))
        ref = ref.astype(np.float64).astype(x.dtype)  # round once (twice for half types: harmless)
    ulps = _ulp_distance(got, ref)
    bad = np.count_nonzero(~(ulps <= POW_ULPS))
    if bad:
        return (
            f"{bad} of {got.size} sampled entries beyond {POW_ULPS:g} ulp (max {np.max(ulps):.3g})"
        )
    return None


def _finfo(dtype: np.dtype):
    if is_bfloat16(dtype):
        import ml_dtypes

        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)


def _eps(dtype: np.dtype) -> float:
    return float(_finfo(dtype).eps)
