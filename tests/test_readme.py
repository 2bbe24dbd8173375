"""The README's promises: its two opening commands, its code example and its account of speed
stay true."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from numba_onnx_ops.bench import DEMO_CASES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _opening_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block, "README must open with a bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_two_commands():
    assert README.index("```bash") < README.index("## "), "the commands come first"
    assert len(_opening_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_command = _opening_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in [line.strip() for line in ci]


def test_readme_python_example_runs():
    block = re.search(r"```python\n(.*?)```", README, re.S)
    namespace: dict = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    assert namespace["c"].shape == (8, 64, 16)
    arrays = {name: v for name, v in namespace.items() if isinstance(v, np.ndarray)}
    not_finite = [name for name, v in arrays.items() if not np.isfinite(v).all()]
    assert not not_finite, f"the example shows NaN or inf in {not_finite}"


def test_readme_speed_claims_cite_the_main_jobs_rows():
    """Before the first example the README says where the main job's table shows the library
    faster than its peers and where not, naming rows that the main job runs."""
    intro = README[: README.index("```python")]
    cited = re.findall(r"`((?:matmul|pow)-[\w.-]+)`", intro)
    assert cited, "the intro names the main job's rows it describes"
    assert set(cited) <= set(DEMO_CASES), set(cited) - set(DEMO_CASES)
