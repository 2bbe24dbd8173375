"""The stamp on numba's on-disk cache of the kernels: it covers every module a kernel reads while
it compiles, and no other, so that an edit of any of them recompiles the kernels and an edit
elsewhere does not; where one of them cannot be read, the kernels are not cached at all."""

from __future__ import annotations

import ast
import os
import py_compile
import shutil
from pathlib import Path

from child import run_python
from package_imports import MODULES, PACKAGE, imported, imports, tree

import numba_onnx_ops as nox
from numba_onnx_ops.runtime import jit


def _defines_kernels(name: str) -> bool:
    """Whether the module puts functions in numba's on-disk cache: through the ``kernel``
    decorator, or ``cache=True`` of numba's own."""
    return (jit.__name__, "kernel") in imported(name) or any(
        isinstance(node, ast.keyword)
        and node.arg == "cache"
        and isinstance(node.value, ast.Constant)
        and node.value.value is True
        for node in ast.walk(tree(name))
    )


def kernel_sources() -> set[str]:
    """The modules that define cached kernels and every package module they import, directly or
    through others: all that kernels can read while they compile.  A name imported from a
    package is its submodule where it has one, else the package's own ``__init__``."""
    todo = [name for name in MODULES if _defines_kernels(name)]
    read = set(todo)
    while todo:
        for dep in imports(todo.pop()) - read:
            read.add(dep)
            todo.append(dep)
    return read


def _copy_package(tmp_path: Path) -> Path:
    copy = tmp_path / "src" / nox.__name__
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_stamp_covers_every_module_kernels_read_and_no_other(tmp_path):
    read = kernel_sources()
    # the derivation reaches the helpers' modules and the constants' (two imports away)
    assert {f"{nox.__name__}.ops.pow.powmath", f"{nox.__name__}.runtime.cpu"} <= read
    copy = _copy_package(tmp_path)
    stamp = jit.stamp_sources(copy)
    assert stamp is not None
    assert jit.sources_stamp() == jit.stamp_sources(PACKAGE)  # the package found where it is
    missed, needless = [], []
    for name, path in sorted(MODULES.items()):
        edited = copy / path.relative_to(PACKAGE)
        source = edited.read_bytes()
        edited.write_bytes(source + b"# edited\n")
        changed = jit.stamp_sources(copy) != stamp
        edited.write_bytes(source)
        if name in read and not changed:
            missed.append(name)
        elif changed and name not in read:
            needless.append(name)
    where = f"KERNEL_SOURCES in {jit.__name__}"
    assert not missed, f"kernels read {missed} while they compile: list them in {where}"
    assert not needless, f"kernels do not read {needless}: remove them from {where}"


# float64 x ** 0.5: one of the cheapest kernels to compile, and it inlines ``sqrt_any`` from
# ``powmath``.  A call this small runs the calling thread's kernel (``pow_sqrt_here``), a
# large one the pool's: the hits counted are those of both, of which the call runs one.  The
# edits below keep each file's size and time, all that Python's bytecode cache and older
# numbas' own stamp compare: the child writes no bytecode, so that it runs what the sources
# say, and only the stamp here can tell that they changed.
RUN = """
import sys
sys.path.insert(0, sys.argv[1])  # ahead of the working directory
import numpy as np, numba_onnx_ops as nox
from numba_onnx_ops.ops.pow import kernels
assert nox.__file__.startswith(sys.argv[1])
got = nox.pow(np.array([4.0, 9.0]), 0.5)
ran = (kernels.pow_sqrt, kernels.HERE[kernels.pow_sqrt])
print(*got.tolist(), sum(sum(k.stats.cache_hits.values()) for k in ran))
"""
# NUMBA_CACHE_DIR empty: the cache next to the sources, as where a package is installed
ENV = {"NUMBA_CACHE_DIR": "", "PYTHONDONTWRITEBYTECODE": "1"}


def _run(copy: Path) -> tuple[list[float], int]:
    *got, hits = run_python(RUN, copy.parent, env=ENV).split()
    return [float(v) for v in got], int(hits)


def _edit(path: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` of the same length, keeping the file's size and time."""
    assert len(old) == len(new)
    source = path.read_text()
    assert source.count(old) == 1, old
    times = path.stat()
    path.write_text(source.replace(old, new))
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


def test_no_edit_of_a_module_kernels_read_is_served_stale(tmp_path):
    copy = _copy_package(tmp_path)
    pow_dir = copy / "ops" / "pow"
    with open(copy / "runtime" / "cpu.py", "a") as f:
        f.write("\nOFFSET = 0.0\n")  # a constant of another module than the kernel's
    with open(pow_dir / "powmath.py", "a") as f:
        f.write(
            "\nfrom ...runtime.cpu import OFFSET\n\n_sqrt_any = sqrt_any\n\n\n"
            "@njit(inline='always')\ndef sqrt_any(x):\n    return _sqrt_any(x) + OFFSET\n"
        )
    with open(pow_dir / "kernels.py", "a") as f:
        f.write(
            "\n_sqrt_any = sqrt_any\n\n\n"
            "@njit(inline='always')\ndef sqrt_any(x):\n    return _sqrt_any(x) * 1.0\n"
        )
    assert _run(copy) == ([2.0, 3.0], 0)  # compiled and saved
    assert _run(copy) == ([2.0, 3.0], 1)  # unchanged sources: loaded
    _edit(copy / "runtime" / "cpu.py", "OFFSET = 0.0", "OFFSET = 1.0")
    assert _run(copy) == ([3.0, 4.0], 0)
    _edit(pow_dir / "kernels.py", "* 1.0", "* 3.0")  # the kernel's own module
    assert _run(copy) == ([9.0, 12.0], 0)


def test_a_source_that_cannot_be_read_turns_the_cache_off(tmp_path):
    copy = _copy_package(tmp_path)
    powmath = copy / "ops" / "pow" / "powmath.py"
    py_compile.compile(str(powmath), cfile=str(powmath.with_suffix(".pyc")), doraise=True)
    powmath.unlink()  # imported from its bytecode alone
    assert jit.stamp_sources(copy) is None
    assert _run(copy) == ([2.0, 3.0], 0)
    assert not [p for p in copy.rglob("*") if p.suffix in (".nbi", ".nbc")]  # nothing saved
