"""Python code run in a fresh interpreter, for the tests that need one (a cold numba cache,
other CPU settings, a process that imports nothing else)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run_python(code: str, *args, env: dict | None = None, timeout: float = 300) -> str:
    """Run ``code`` (dedented) with ``args`` as its arguments, in this process's environment
    updated by ``env``; assert that it exits with 0 (showing the end of its stderr if not) and
    return its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
