"""``python -m mshadow`` and ``ms.show_config()``: the build's facts, one per line."""
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mshadow as ms
from mshadow import config

LABELS = ["mshadow", "python", "platform", "compiler", "numpy", "SIMD compiled", "SIMD detected",
          "OpenMP threads", "BLAS", "CUDA"]


def _run(*args, env=None):
    # The child imports the mshadow this process imported (an in-place build or an install),
    # from tests/: with `-m` the working directory comes first on sys.path, and a source
    # checkout's root would shadow an installed mshadow with its unbuilt package.
    env = dict(os.environ if env is None else env)
    paths = [os.path.dirname(os.path.dirname(ms.__file__)), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return subprocess.run([sys.executable, "-m", "mshadow", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=os.path.dirname(__file__))


@pytest.fixture(scope="module")
def printed():
    env = dict(os.environ, OMP_NUM_THREADS="3")
    r = _run(env=env)
    assert r.returncode == 0, r.stderr
    return {line.split(":", 1)[0]: line.split(":", 1)[1].strip()
            for line in r.stdout.splitlines()}


def test_python_m_mshadow_prints_every_fact(printed):
    for label in LABELS:
        assert label in printed and printed[label], label
    assert printed["mshadow"] == ms.__version__
    assert printed["numpy"] == np.__version__


def test_simd_lines(printed):
    if not hasattr(ms._core, "simd_info"):
        assert printed["SIMD compiled"] == "SSE2 baseline"
    # the oracle is the kernel's CPU flags (numpy's feature table is private)
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), None)
    except OSError:
        flags = None
    words = printed["SIMD detected"].split()
    if flags is not None:
        if "sse2" in flags:
            assert words[0] == "SSE2"
        for feature in ("AVX2", "AVX512F"):
            assert (feature in words) == (feature.lower() in flags)
    info = getattr(ms._core, "simd_info", None)
    if info is not None and isinstance(info(), dict):
        assert printed["SIMD compiled"] == " ".join(info()["compiled"])
        assert f"(mshadow: {info()['detected']})" in printed["SIMD detected"]


def test_openmp_threads_line(printed):
    if hasattr(ms._core, "get_num_threads"):
        assert printed["OpenMP threads"].split()[0].isdigit()
    else:
        assert printed["OpenMP threads"] == "3 (OMP_NUM_THREADS)"


def test_blas_line_names_scipys_blas(printed):
    scipy = pytest.importorskip("scipy")
    blas = scipy.show_config(mode="dicts")["Build Dependencies"]["blas"]
    assert printed["BLAS"].startswith(blas["name"])
    assert f"scipy {scipy.__version__}" in printed["BLAS"]


def test_cuda_line(printed):
    try:
        import mshadow.cuda as cuda     # noqa: F401
    except ModuleNotFoundError:
        assert printed["CUDA"] == config.CUDA_NOT_BUILT
        assert "NVRTC" in printed["CUDA"] and "driver" in printed["CUDA"]
    else:
        assert printed["CUDA"].startswith(("available", "not available", "unavailable",
                                           "emulated device"))


@pytest.mark.parametrize("value, line", [
    ("emulate", "emulated device (MSHADOW_CUDA=emulate)"),
    ("gpu", "unavailable (MSHADOW_CUDA='gpu' is not a CUDA driver mshadow has: leave "
            "MSHADOW_CUDA unset (or empty) for the real device, or set MSHADOW_CUDA=emulate "
            "for the emulated one)")])
def test_cuda_line_follows_mshadow_cuda(value, line):
    pytest.importorskip("mshadow.cuda._cuda", reason="no GPU backend in this build")
    r = _run("--json", env=dict(os.environ, MSHADOW_CUDA=value))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["CUDA"]
    assert got == line or (value == "emulate" and got == line + ": no g++ to compile its "
                                                                "kernels")


def test_json_and_usage():
    r = _run("--json")
    assert r.returncode == 0 and list(json.loads(r.stdout)) == [
        k for k in config.get_config()]
    bad = _run("--nonsense")
    assert bad.returncode == 2 and "usage: python -m mshadow" in bad.stderr


def test_show_config_in_process_matches_get_config():
    buf = io.StringIO()
    ms.show_config(file=buf)
    lines = buf.getvalue().splitlines()
    cfg = config.get_config()
    assert len(lines) == len(cfg)
    for line, (k, v) in zip(lines, cfg.items()):
        assert line.startswith(k + ":") and line.endswith(str(v))


def test_fallbacks_without_core_probes(monkeypatch):
    """Before the core has simd_info/get_num_threads: SSE2 baseline and the environment."""
    monkeypatch.setattr(config, "_core", lambda: object())
    assert config._simd_compiled() == ("SSE2 baseline", None)
    assert config._core_detected() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert config._threads() == f"{os.cpu_count() or 1} (os.cpu_count)"
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")
    assert config._threads() == "4 (OMP_NUM_THREADS)"


def test_help_exits_zero_and_describes_the_options():
    r = _run("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: python -m mshadow") and "--json" in r.stdout


def test_compiler_line_is_the_recorded_build_compiler(printed):
    info = config._build_info()
    if info is None:      # a build not made by setup.py's build_ext records nothing
        assert printed["compiler"].startswith("unknown: no build record")
        return
    assert info["compiler"] in printed["compiler"]
    assert ("no OpenMP" in printed["compiler"]) == (not info["openmp"])
    if info["compiler_version"]:
        assert printed["compiler"].startswith(info["compiler_version"])


def test_compiler_line_without_a_build_record(monkeypatch):
    monkeypatch.setattr(config, "_build_info", lambda: None)
    assert config._compiler().startswith("unknown: no build record (sysconfig CC is ")
    monkeypatch.setattr(config, "_build_info", lambda: {
        "compiler": "/opt/cc/bin/gcc-13", "compiler_version": "gcc (X) 13.1", "openmp": False,
        "numpy_build": "2.1.0"})
    assert config._compiler() == "gcc (X) 13.1 (/opt/cc/bin/gcc-13, no OpenMP, numpy 2.1.0 headers)"


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_closed_pipe_ends_quietly(args):
    # `python -m mshadow | head -1`: the reader may go before the facts are written. Here it
    # is gone before the child starts writing (a pipe whose read end is closed), so every
    # write fails: the child must end without a traceback and without claiming success.
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(ms.__file__)), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    r_fd, w_fd = os.pipe()
    os.close(r_fd)
    try:
        r = subprocess.run([sys.executable, "-m", "mshadow", *args], stdout=w_fd,
                           stderr=subprocess.PIPE, text=True, timeout=60, env=env,
                           cwd=os.path.dirname(__file__))
    finally:
        os.close(w_fd)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
