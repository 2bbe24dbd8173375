"""Half-type Pow through a table of all 65,536 results: bit-identical to the direct kernels for
every base, in every layout, with every kind of one-element exponent; the table cache stays
bounded and is safe under threads.

The direct kernels are the reference here (their accuracy is checked in test_pow.py and
test_pow_accuracy.py); the table is computed by them, so any difference is the table's fault.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from oracles import BF16, F16, F32, F64, I8, I64, LAYOUTS, U64, as_layout, dtype_id

import numba_onnx_ops as noo
from numba_onnx_ops import tuning
from numba_onnx_ops.core import plans
from numba_onnx_ops.ops.pow import plan as front
from numba_onnx_ops.ops.pow import tables as _tables

EVERY = np.arange(2**16, dtype=np.uint16)


def every(xdtype, size: int | None = None) -> np.ndarray:
    """Every base of ``xdtype`` in turn, as ``size`` elements; by default enough for a call
    that both takes a table (``tuning.TABLE_USE_MIN``) and builds it on its own
    (``tuning.TABLE_BUILD_MIN``), a multiple of 256 of them."""
    if size is None:
        size = -(-max(EVERY.size, tuning.TABLE_USE_MIN, tuning.TABLE_BUILD_MIN) // 256) * 256
    return np.resize(EVERY, size).view(xdtype)


# (value, exponent dtype or None for the base's own); integers, fractions, the classes that
# keep their own kernel (2, 0.5, -1) and the special values.
EXPONENTS = [
    (3.7, None), (-1.5, None), (0.75, BF16), (3.7, F32), (1 / 3, F64), (-2.5, None),
    (3.0, None), (-3, I8), (5, I64), (-0.5, None), (2**63 + 1, U64), (1e5, F64), (-1e5, F64),
    (2.0, None), (0.5, None), (-1.0, None), (np.nan, None), (np.inf, None), (-np.inf, None),
    (-0.0, None), (1e-3, F64),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_tables():
    front._tables.clear()
    yield
    front._tables.clear()


@pytest.fixture
def direct(monkeypatch):
    """Call noo.pow with the table path switched off (no call plan made with it switched off
    outlives the call)."""

    def call(*args, **kwargs):
        try:
            with monkeypatch.context() as m:
                m.setattr(tuning, "TABLE_USE_MIN", 2**62)
                m.setattr(tuning, "TABLE_BUILD_MIN", 2**62)
                plans.clear()
                return noo.pow(*args, **kwargs)
        finally:
            plans.clear()

    return call


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def _exponent(value, ydtype, xdtype) -> np.ndarray:
    return np.asarray(value).astype(ydtype or xdtype)


@pytest.mark.parametrize(("value", "ydtype"), EXPONENTS, ids=str)
@pytest.mark.parametrize("xdtype", [F16, BF16], ids=dtype_id)
def test_every_base_matches_the_direct_kernel(xdtype, value, ydtype, direct):
    x = every(xdtype)
    y = _exponent(value, ydtype, xdtype)
    want = direct(x, y)
    got = noo.pow(x, y)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    kernel = front.scalar_class(np.dtype(xdtype), y)[0]
    tabled = kernel not in ("one", "copy") and kernel not in front._HALF_DIRECT
    assert len(front._tables) == int(tabled)  # the table path really ran where it should


@pytest.mark.parametrize("layout", [*LAYOUTS, "transposed", "offset"])
@pytest.mark.parametrize("xdtype", [F16, BF16], ids=dtype_id)
def test_layouts_and_out(xdtype, layout, direct, rng):
    base = rng.permutation(every(xdtype)).reshape(256, -1)
    if layout == "transposed":
        x = base.T
    elif layout == "offset":
        x = base.reshape(-1)[3:-2]  # the four-at-a-time loop's tail and an odd start
    else:
        x = as_layout(base, layout)
    y = np.asarray(-1.5, xdtype)
    want = direct(x, y)
    np.testing.assert_array_equal(_bits(noo.pow(x, y)), _bits(want))
    out = np.full(want.shape, 7, xdtype)
    assert noo.pow(x, y, out=out) is out
    np.testing.assert_array_equal(_bits(out), _bits(want))
    out_f = np.zeros(want.shape, xdtype, order="F")
    noo.pow(x, y, out=out_f)
    np.testing.assert_array_equal(_bits(out_f), _bits(want))
    assert len(front._tables) == 1


@pytest.mark.parametrize("opset", [1, 7, 13, 15])
def test_weak_python_exponents(opset, direct):
    x = every(F16)
    for value in (3.7, -1.5, 3, 0.1):
        want = direct(x, value, opset=opset)
        np.testing.assert_array_equal(_bits(noo.pow(x, value, opset=opset)), _bits(want))
    assert len(front._tables) == 4


def test_one_element_exponent_of_any_rank(direct):
    x = every(BF16).reshape(16, -1)
    for y in (np.full((1, 1), 3.7, F32), np.full((1,), 0.3, BF16)):
        np.testing.assert_array_equal(_bits(noo.pow(x, y)), _bits(direct(x, y)))
    x, y = x.view(F16), np.full((1, 1), 2.5, F16)
    got = noo.pow(x, y, opset=1, broadcast=1)
    np.testing.assert_array_equal(_bits(got), _bits(direct(x, y, opset=1, broadcast=1)))


def test_small_calls_stay_direct_until_they_add_up(direct):
    x = every(F16, tuning.TABLE_USE_MIN - 1)
    y = np.asarray(3.7, F16)
    for _ in range(100):
        noo.pow(x, y)
    assert len(front._tables) == 0  # too small for a table at all
    # calls large enough for a table, each a quarter or more of the elements that pay for one
    size = max(tuning.TABLE_USE_MIN, tuning.TABLE_BUILD_MIN // 4)
    x = every(F16, size)
    for _ in range(-(-tuning.TABLE_BUILD_MIN // size) - 1):
        np.testing.assert_array_equal(_bits(noo.pow(x, y)), _bits(direct(x, y)))
    assert len(front._tables) == 0
    noo.pow(x, y)  # the call that brings the tally to TABLE_BUILD_MIN elements
    assert len(front._tables) == 1
    np.testing.assert_array_equal(_bits(noo.pow(x, y)), _bits(direct(x, y)))


def test_cache_is_bounded_and_keeps_recent_tables():
    x = every(F16)
    first = np.asarray(1.25, F16)
    noo.pow(x, first)
    for k in range(3 * _tables.MAX_TABLES):
        noo.pow(x, np.asarray(1.5 + k / 64, F16))
        noo.pow(x, first)  # used all along: never evicted
        assert len(front._tables) <= _tables.MAX_TABLES
    assert front._tables.get((np.dtype(F16), np.dtype(F16), first.tobytes())) is not None
    assert len(front._tables) == _tables.MAX_TABLES


def test_keys_tell_dtypes_and_bits_apart(direct):
    x = every(F16)
    exponents = [np.asarray(0.1, F16), np.asarray(0.1, F32), np.asarray(0.1, F64)]
    exponents += [np.asarray(0.1, F16).view(np.uint16).view(BF16)]  # same bits, other dtype
    for y in exponents:
        np.testing.assert_array_equal(_bits(noo.pow(x, y)), _bits(direct(x, y)))
    assert len(front._tables) == 4


def test_tables_are_read_only():
    noo.pow(every(F16), np.asarray(3.7, F16))
    (table,) = front._tables._tables.values()
    with pytest.raises(ValueError):
        table[0] = 1


def test_threads_share_the_cache(direct):
    bases = [every(F16), every(BF16)]
    exponents = [np.asarray(0.5 + k / 8, F32) for k in range(2 * _tables.MAX_TABLES)]
    wanted = {(b.dtype, k): _bits(direct(b, y)) for b in bases for k, y in enumerate(exponents)}
    front._tables.clear()
    errors = []
    barrier = threading.Barrier(8)

    def work(seed):
        barrier.wait()
        order = np.random.default_rng(seed).permutation(len(exponents))
        for round_ in range(3):
            for k in order:
                b = bases[(seed + k + round_) % 2]
                got = _bits(noo.pow(b, exponents[k]))
                if not np.array_equal(got, wanted[(b.dtype, k)]):
                    errors.append((seed, k, str(b.dtype)))
                if len(front._tables) > _tables.MAX_TABLES:
                    errors.append(("cache over its bound", len(front._tables)))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(front._tables) <= _tables.MAX_TABLES
