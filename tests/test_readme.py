"""The README's promises: its two opening commands, its code example, its account of speed and
its asv commands stay true."""

from __future__ import annotations

import itertools
import math
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

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


def _asv_commands() -> list[list[str]]:
    """The asv commands of the README's Benchmarks section, split as bash splits them."""
    section = README[README.index("## Benchmarks") :]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            starts = [0] + [i + 1 for i, word in enumerate(words) if word == "&&"]
            ends = [i for i, word in enumerate(words) if word == "&&"] + [len(words)]
            commands += [words[s:e] for s, e in zip(starts, ends) if words[s:e][:1] == ["asv"]]
    return commands


def _asv_benchmarks() -> list[str]:
    """Every benchmark name asv selects with ``-b`` (``name(param, ...)`` for each parameter
    combination, as asv matches them), found by asv's own discovery."""
    discovery = pytest.importorskip("asv_runner.discovery")
    sys.path.insert(0, str(ROOT))
    try:
        found = list(discovery.disc_benchmarks(str(ROOT / "benchmarks")))
    finally:
        sys.path.remove(str(ROOT))
    names = []
    for benchmark in found:
        if not benchmark.params:
            names.append(benchmark.name)
        for combination in itertools.product(*benchmark.params):
            names.append(f"{benchmark.name}({', '.join(combination)})")
    return names


def test_readme_asv_machine_prints_nothing():
    """``asv machine --yes`` prints its questionnaire: the README sends it to /dev/null."""
    machine = [c for c in _asv_commands() if c[1] == "machine"]
    assert machine
    for command in machine:
        assert command[-2:] == [">", "/dev/null"], shlex.join(command)


def test_readme_quick_asv_run_selects_a_few_benchmarks():
    """The short asv run the README offers selects something with each ``-b``, and few
    enough combinations (each a fresh interpreter) to take a minute or so."""
    runs = [c for c in _asv_commands() if c[1] == "run" and "-b" in c]
    assert runs, "the README offers an asv run of a few named benchmarks"
    names = _asv_benchmarks()
    for command in runs:
        patterns = [command[i + 1] for i, word in enumerate(command) if word == "-b"]
        for pattern in patterns:
            assert any(re.search(pattern, name) for name in names), pattern
        selected = [name for name in names if any(re.search(p, name) for p in patterns)]
        assert 0 < len(selected) <= 20, (shlex.join(command), len(selected))


def test_readme_states_the_size_of_the_full_asv_run():
    """The README's count of parameter combinations, behind its time for the whole suite,
    is the suite's to within a tenth."""
    stated = re.search(r"about ([\d,]+) parameter combinations", README)
    assert stated, "the README says how many combinations the whole asv run times"
    count = int(stated.group(1).replace(",", ""))
    assert math.isclose(count, len(_asv_benchmarks()), rel_tol=0.1)
