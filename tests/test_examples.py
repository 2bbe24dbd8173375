"""The notebooks in examples/ run in CI (``--nbmake`` in pyproject's pytest options); here, that
they are committed without outputs, so that their diffs show only what changed in the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.ipynb"))


def test_there_are_notebooks():
    assert any(path.name == "quickstart.ipynb" for path in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code
    assert all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
