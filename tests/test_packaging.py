"""What a user installing the package from a wheel relies on: one version, the license text,
the typing marker."""

from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path

import numba_onnx_ops as nox

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_installed_metadata():
    assert nox.__version__ == metadata.version("numba_onnx_ops")


def test_license_file_holds_the_declared_license():
    info = metadata.metadata("numba_onnx_ops")
    assert info["License-Expression"] == "Apache-2.0" and info["License-File"] == "LICENSE"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_typing_marker_ships_with_the_package():
    assert resources.files("numba_onnx_ops").joinpath("py.typed").is_file()
    assert 'numba_onnx_ops = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()
