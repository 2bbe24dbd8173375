"""numba internals this package reaches into: a later numba that renames them must not bring back
stale cached machine code or break a call; the kernels fall back to numba's plain behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba

from numba_onnx_ops import _numba_private

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
    "slp_switch": nox._numba_private._HAVE_SLP_SWITCH,
    "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
}))
"""


def _run(mode: str, cache: Path) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


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
    assert any(name.startswith("matmul.matmul_small") for name in _cached_files(tmp_path / "usual"))


def test_the_checked_versions_are_named():
    # The module docstring and the warning name the versions whose sources were read.
    assert _numba_private.CHECKED_ON and all(
        v in _numba_private.__doc__ for v in _numba_private.CHECKED_ON
    )
