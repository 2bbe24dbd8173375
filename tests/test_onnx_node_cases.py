"""ONNX's own backend node test cases for MatMul and Pow (test_matmul_*, test_pow_*).

onnx >= 1.23 generates them in memory (onnx.backend.test.case.node.collect_testcases); each case
is a one-node model with its inputs and numpy-computed expected outputs. They run here with the
opset the model imports, and again at every other version whose types allow them. The slow test
test_collect_testcases_has_no_other_cases runs the full collection to check none is missed.

Expected outputs come from numpy: float32 MatMul through BLAS (any summation order), float32 Pow
through the C library's powf (within 1 ulp of the correctly rounded value, not always equal to
it). So against the expected output a float result may differ by the summation-order bound
(MatMul) or by 2 ulp (Pow: 1 for numpy, 1 for the library); against the independent oracle the
library is held to the spec's own bound.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from oracles import (
    MATMUL_SINCE,
    POW_SINCE,
    SPEC_MATMUL_TYPES,
    SPEC_POW_TYPES,
    assert_matmul_close,
    assert_pow_matches,
    assert_same_values,
    assert_within_ulp,
    is_int,
    matmul_float_reference,
    resolved_version,
)

import numba_onnx_ops as noo

OPS = {"MatMul": noo.matmul, "Pow": noo.pow}


def _select(cases) -> dict:
    selected = {}
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in OPS and nodes[0].domain in ("", "ai.onnx"):
            selected[case.name] = case
    return selected


def _collect() -> dict:
    """The MatMul and Pow node cases.

    ``collect_testcases()`` imports every operator's generator module (10-20 s here); the cases
    of these two operators come from their own modules, whose import registers them in the list
    that ``collect_testcases`` returns. The slow test below checks that nothing is missed.
    """
    import importlib

    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in ("matmul", "pow"):
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    selected = _select(getattr(node_cases, "_NodeTestCases", []))
    if not selected:  # onnx reorganised its internals: take the documented, slow route
        selected = _select(_collect_all())
    return selected


def _collect_all():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # other operators' generators warn about overflows
        warnings.simplefilter("ignore")
        return collect_testcases()


CASES = _collect()


@pytest.mark.slow
def test_collect_testcases_has_no_other_cases():
    assert sorted(_select(_collect_all())) == sorted(CASES)


def model_opset(case) -> int:
    (version,) = [o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")]
    return version


def node_attributes(case) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in case.model.graph.node[0].attribute}


def test_all_cases_are_collected():
    names = sorted(CASES)
    assert len([n for n in names if n.startswith("test_matmul")]) >= 7, names
    assert len([n for n in names if n.startswith("test_pow")]) >= 12, names
    assert all(n.startswith(("test_matmul", "test_pow")) for n in names), names


def run_case(case, opset, **kwargs):
    node = case.model.graph.node[0]
    assert not node_attributes(case), "Pow-1 attributes would need passing through"
    inputs, outputs = case.data_sets[0]
    inputs = [np.asarray(a) for a in inputs]
    expected = np.asarray(outputs[0])
    copies = [a.copy() for a in inputs]
    result = OPS[node.op_type](*inputs, opset=opset, **kwargs)
    for a, c in zip(inputs, copies, strict=True):
        assert_same_values(a, c, what="input modified")
    assert isinstance(result, np.ndarray)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    if node.op_type == "MatMul":
        assert_matmul_close(result, *inputs, what=case.name)
        if not is_int(expected.dtype):
            # numpy's product obeys the same bound, so the two are within twice of it
            ref, bound = matmul_float_reference(*inputs)
            assert (np.abs(result.astype(ref.dtype) - expected) <= 2 * bound).all()
            return
    else:
        assert_pow_matches(result, *inputs, what=case.name)
        if not is_int(expected.dtype):
            assert_within_ulp(result, expected, expected.dtype, max_ulp=2, rel_err=0)
            return
    assert_same_values(result, expected, what=case.name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name):
    case = CASES[name]
    run_case(case, model_opset(case))


def _other_versions():
    params = []
    for name in sorted(CASES):
        case = CASES[name]
        op = case.model.graph.node[0].op_type
        inputs = case.data_sets[0][0]
        since = MATMUL_SINCE if op == "MatMul" else POW_SINCE
        own = resolved_version(since, model_opset(case))
        for version in since:
            if version == own:
                continue
            if op == "MatMul":
                ok = all(np.asarray(a).dtype in SPEC_MATMUL_TYPES[version] for a in inputs)
            else:
                t, t1 = SPEC_POW_TYPES[version]
                x, y = (np.asarray(a).dtype for a in inputs)
                ok = x in t and y in t1 and (version >= 12 or x == y)
            if ok:
                params.append(pytest.param(name, version, id=f"{name}-{op}{version}"))
    return params


@pytest.mark.parametrize(("name", "version"), _other_versions())
def test_node_case_at_other_versions(name, version):
    case = CASES[name]
    x, y = (np.shape(a) for a in case.data_sets[0][0][:2])
    # Pow-1 broadcasts only when asked (the ONNX cases broadcast a scalar or a suffix)
    legacy = version == 1 and case.model.graph.node[0].op_type == "Pow" and x != y
    run_case(case, version, **({"broadcast": 1} if legacy else {}))
