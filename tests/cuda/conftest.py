"""Fixtures of the emulated device's tests (tests/cuda/)."""
import os
import subprocess
import sys

import pytest

import mshadow as ms


@pytest.fixture
def run_child(tmp_path):
    """``run_child(code, **env)``: Python ``code`` in a fresh interpreter that imports the
    mshadow this process imported, with ``env`` added to the environment and the kernel
    cache in this test's directory; returns the CompletedProcess (text)."""
    def run(code, **env):
        full = dict(os.environ, MSHADOW_CUDA_CACHE=str(tmp_path / "cache"), **env)
        full["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.dirname(os.path.dirname(ms.__file__)),
                        os.environ.get("PYTHONPATH")) if p)
        # (cwd: not a source checkout, whose unbuilt mshadow/ would shadow the install)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=full, timeout=120, cwd=str(tmp_path))
    return run
