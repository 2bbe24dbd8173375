"""numba internals this package reaches into: a later numba that renames them must not bring back
stale cached machine code or break a call; the kernels fall back to numba's plain behaviour."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import numba
import numpy as np
import pytest
from child import run_python
from package_imports import MODULES, imported, tree

from numba_onnx_ops.runtime import jit
from numba_onnx_ops.runtime import numba_private as _numba_private

SCRIPT = """
import json, sys, types, warnings
warnings.simplefilter("always")
if sys.argv[1] == "renamed":
    import numba.core
    from numba.core import caching

    # A numba whose cache index keeps its freshness stamp under another name ...
    original_init = caching.IndexDataCacheFile.__init__
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self._stamp_elsewhere = self.__dict__.pop("_source_stamp")
    caching.IndexDataCacheFile.__init__ = init
    # ... and whose config module has no SLP switch, while numba itself still runs.
    real_config = numba.core.config
    numba.core.config = types.SimpleNamespace()
with warnings.catch_warnings(record=True) as caught:
    import numpy as np
    import numba_onnx_ops as nox
if sys.argv[1] == "renamed":
    numba.core.config = real_config
# int32 (3, 8, 8) @ (8, 8) goes to the small-matrix kernel, compiled with SLP where numba allows.
a = (np.arange(3 * 64, dtype=np.int32).reshape(3, 8, 8) % 23) - 11
b = (np.arange(64, dtype=np.int32).reshape(8, 8) % 19) - 9
got = nox.matmul(a, b)
exact = [[[sum(int(a[i, r, t]) * int(b[t, c]) for t in range(8)) for c in range(8)]
          for r in range(8)] for i in range(3)]
print(json.dumps({
    "right": got.tolist() == exact,
    "slp_switch": nox.runtime.numba_private._HAVE_SLP_SWITCH,
    "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
}))
"""


def _run(mode: str, cache: Path) -> dict:
    out = run_python(SCRIPT, mode, env={"NUMBA_CACHE_DIR": str(cache)})
    return json.loads(out.splitlines()[-1])


def _cached_files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc"))


def test_renamed_internals_disable_the_cache_and_keep_results(tmp_path):
    renamed = _run("renamed", tmp_path / "renamed")
    assert renamed["right"] and not renamed["slp_switch"]
    (warning,) = renamed["warnings"]  # one warning for all the kernels
    assert f"numba {numba.__version__}" in warning and "without the on-disk cache" in warning
    assert _cached_files(tmp_path / "renamed") == []  # nothing cached that could go stale

    usual = _run("usual", tmp_path / "usual")  # the same script caches where nothing is renamed
    assert usual == {"right": True, "slp_switch": True, "warnings": []}
    assert any(
        name.startswith("kernels.matmul_small") for name in _cached_files(tmp_path / "usual")
    )


def test_the_checked_versions_are_named():
    # The module docstring and the warning name the versions whose sources were read.
    assert _numba_private.CHECKED_ON and all(
        v in _numba_private.__doc__ for v in _numba_private.CHECKED_ON
    )


MACHINE_CODE_SCRIPT = """
import json
import numpy as np
from numba.core import codegen

emitted, optimized = [], []
def recording(method, names):
    def record(self):
        own = [f.name for f in self._final_module.functions
               if not f.is_declaration and "numba_onnx_ops" in f.name]
        if own:
            names.append(self.name)
        return method(self)
    return record
# numba's whole-module optimization, and its machine code
codegen.CPUCodeLibrary._optimize_final_module = recording(
    codegen.CPUCodeLibrary._optimize_final_module, optimized)
codegen.JITCodeLibrary._finalize_specific = recording(
    codegen.JITCodeLibrary._finalize_specific, emitted)

import numba_onnx_ops as nox
from numba_onnx_ops import tuning
from numba_onnx_ops.ops.pow.kernels import CHUNK
from numba_onnx_ops.runtime import jit, pool
# small calls (the calling thread's kernels) and large ones (the pool's, with parallel loops)
pow_right = matmul_right = True
for n in (40, min(tuning.POW_HERE_MAX["general"], CHUNK) + 1):
    x = np.linspace(0.25, 2.0, n).astype(np.float16)
    y = np.linspace(-1.5, 1.5, n).astype(np.float16)
    got = nox.pow(x, y).astype(np.float64)
    pow_right &= bool(np.all(np.abs(got - x.astype(np.float64) ** y) <= 1e-3 * np.abs(got)))
side = 6
while side**3 <= tuning.MATMUL_HERE_MAX:
    side += 1
for n in (6, side):
    a = np.arange(n * n, dtype=np.int32).reshape(n, n) % 35 - 17
    matmul_right &= nox.matmul(a, a).tolist() == (a.astype(np.int64) @ a).tolist()
# and from a user's compiled function: the overloads' code reaches it as modules to link too
import numba
@numba.njit
def users_layer(x, w, e):
    return nox.pow(nox.matmul(x, w), e)
x = np.arange(12, dtype=np.int64).reshape(3, 4) % 5 - 2
layer = users_layer(x, x.T.copy(), 3).tolist()
print(json.dumps({
    "pow": pow_right,
    "matmul": matmul_right,
    "njit": layer == ((x @ x.T) ** 3).tolist(),
    "twins": [twin.py_func.__qualname__ for twin in jit.serial_twins() + pool.task_twins()],
    "emitted": emitted,
    "optimized": optimized,
}))
"""


def _kernel_names() -> set[str]:
    """The functions of the package decorated as kernels (``runtime.jit.kernel``), on the pool
    or the calling thread: with their serial twins, the only functions numba_onnx_ops calls
    from Python."""
    names = set()
    for module in MODULES:
        if (jit.__name__, "kernel") not in imported(module):
            continue
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d.func if isinstance(d, ast.Call) else d) == "kernel"
                for d in node.decorator_list
            ):
                names.add(node.name)
    return names


@pytest.fixture(scope="module")
def machine_code(tmp_path_factory) -> dict:
    """What ``MACHINE_CODE_SCRIPT`` reports, from one run with a cache of its own."""
    cache = tmp_path_factory.mktemp("machine_code")
    out = run_python(MACHINE_CODE_SCRIPT, env={"NUMBA_CACHE_DIR": str(cache)})
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("step", ["emitted", "optimized"])
def test_only_kernels_become_machine_code(machine_code, step):
    """The helpers a kernel calls reach it as LLVM modules to link: numba would otherwise
    optimize each of them as a whole and turn it into machine code of its own, with Python and
    C wrappers, on the first call.  So do the overloads' functions a user's ``@njit`` function
    calls (``users_layer``): its own compile optimizes them.  Of the functions numba builds
    for a parallel loop, only the loop's body is optimized and becomes machine code before the
    kernel does (numba takes the address of its entry); its two wrappers are only linked."""
    result = machine_code
    assert result["pow"] and result["matmul"] and result["njit"]
    kernels = _kernel_names() | {"users_layer"}
    # a twin is its kernel's code under the kernel's name and ``_here`` (serial) or ``_tasks``
    # (the own pool's)
    twins = result["twins"]
    assert all(t.removesuffix("_here").removesuffix("_tasks") in kernels for t in twins), twins
    kernels |= set(result["twins"])
    others = [
        n for n in result[step] if n not in kernels and not n.startswith("__numba_parfor_gufunc")
    ]
    assert others == []
    # kernels of both places went through the step: the pool's and the calling thread's
    assert any(n in kernels and not n.endswith("_here") for n in result[step]), result[step]
    assert any(n in kernels and n.endswith("_here") for n in result[step]), result[step]


def test_helpers_refuse_calls_from_python():
    import numpy as np
    import pytest

    from numba_onnx_ops.runtime import half

    with pytest.raises(TypeError, match="compiled into numba_onnx_ops kernels only"):
        half.f16_to_f32(np.uint16(0x3C00))
    # called from compiled code, the same helper works
    assert numba.njit(lambda b: half.f16_to_f32(b))(np.uint16(0x3C00)) == 1.0


CACHED_KERNEL = """
from numba_onnx_ops.runtime.jit import kernel


@kernel()
def first_sum(x, y):
    return x[0] + y[0]
"""


def _process_view(path: Path, name: str):
    """``first_sum`` of the module at ``path`` as another process sees it: a dispatcher of its
    own over the same source and the same on-disk cache."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.first_sum


@pytest.mark.parametrize("other", [np.float32, np.int64], ids=["float32", "int64"])
def test_a_cache_entry_of_another_signature_is_compiled_again(tmp_path, other):
    """Two processes that save different signatures of one kernel at the same moment can leave
    numba's cache index naming, for one signature, the data file of the other (numba reads the
    index, adds its entry, writes it back, then writes the data, without a lock).  Replayed here
    in one process, in that order: a process loading that signature later must compile it, not
    run the other's machine code (a TypeError where the item sizes differ, float32 here; wrong
    values where they agree, int64 read for uint64), and its save mends the entry."""
    path = tmp_path / "cached_kernel.py"
    path.write_text(CACHED_KERNEL)
    x = np.ones(2)
    y = np.full(2, 2**63 + 2048, np.uint64)
    expected = 1.0 + float(2**63 + 2048)
    first, second = _process_view(path, "first"), _process_view(path, "second")
    first_index, second_index = first._cache._cache_file, second._cache._cache_file
    write_data = first_index._save_data

    def write_data_last(name, data):
        # ``first`` has written the index; ``second`` read it before that, so both take the
        # first data file, and ``second`` writes its data before ``first`` does.
        second_index._load_index = dict
        assert second(x, y) == expected
        del second_index._load_index
        write_data(name, data)

    first_index._save_data = write_data_last
    assert first(x, np.ones(2, other)) == 2.0
    # the index names the uint64 signature alone, and its file holds the other's code
    assert [key[0] for key in first_index._load_index()] == [second.signatures[0]]

    later = _process_view(path, "later")
    assert later(x, y) == expected
    assert later.stats.cache_hits.total() == 0  # compiled
    mended = _process_view(path, "mended")
    assert mended(x, y) == expected
    assert mended.stats.cache_hits.total() == 1  # loaded
