"""Opset resolution (semantics.md): every opset the package knows resolves to the version ONNX
defines there, and the package's newest opset is public."""

from __future__ import annotations

import pytest
from oracles import MATMUL_SINCE, POW_SINCE, resolved_version

import numba_onnx_ops as nox
from numba_onnx_ops.core import versions

SINCE = {"MatMul": MATMUL_SINCE, "Pow": POW_SINCE}


def test_newest_opset_is_public():
    assert "NEWEST_OPSET" in nox.__all__
    assert type(nox.NEWEST_OPSET) is int
    assert nox.NEWEST_OPSET == versions.NEWEST_OPSET
    assert nox.NEWEST_OPSET >= max(MATMUL_SINCE + POW_SINCE)


@pytest.mark.parametrize("op", sorted(SINCE))
def test_every_known_opset_resolves(op):
    for opset in range(1, nox.NEWEST_OPSET + 1):
        assert nox.resolve_version(op, opset) == resolved_version(SINCE[op], opset), opset
    assert nox.resolve_version(op, None) == max(SINCE[op])


@pytest.mark.parametrize("op", sorted(SINCE))
def test_onnx_schema_history_matches_the_tables(op):
    """The versions the installed onnx defines for ``op`` at every opset the package knows are
    the package's: an onnx that adds a version at one of those opsets fails here.  Opsets above
    the package's newest are not compared (the package refuses them), nor opsets above the
    installed onnx's newest (its schemas do not know them yet)."""
    onnx = pytest.importorskip("onnx")
    known = min(nox.NEWEST_OPSET, onnx.defs.onnx_opset_version())
    history = sorted(
        schema.since_version
        for schema in onnx.defs.get_all_schemas_with_history()
        if schema.name == op and schema.domain in ("", "ai.onnx") and schema.since_version <= known
    )
    tables = {"MatMul": versions.MATMUL_ALLOWED, "Pow": versions.POW_ALLOWED}
    assert history == sorted(v for v in tables[op] if v <= known)
    for opset in range(1, known + 1):
        schema = onnx.defs.get_schema(op, opset, "")
        assert nox.resolve_version(op, opset) == schema.since_version, opset
