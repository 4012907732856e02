"""mshadow.ps across processes: mpiexec -n 2 and -n 4 on loopback, each run bounded in time.

The ranks run tests/ps_mpi_worker.py, which checks its own results against references it
builds with numpy; here we check that every rank said so, and how the job ended.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from mshadow.testing import child_env

pytest.importorskip("mpi4py",
                    reason="mshadow.ps's mpi backend needs mpi4py (pip install mpi4py mpich)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "ps_mpi_worker.py")


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")   # the mpich wheel's
    exe = here if os.path.exists(here) else shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec on PATH (pip install mpich)")
    try:
        info = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"mpiexec --version failed: {e}")
    text = info.stdout + info.stderr
    if "HYDRA" in text:
        return exe, "hydra"
    if "Open MPI" in text or "OpenRTE" in text:
        return exe, "openmpi"
    pytest.skip(f"unknown MPI launcher {exe}: {text.strip()[:80]!r}")


def _run(n, args, timeout, keep_going=False):
    exe, kind = _mpiexec()
    cmd = [exe]
    if kind == "openmpi":
        cmd += ["--allow-run-as-root", "--oversubscribe"]
    if keep_going:
        if kind != "hydra":
            pytest.skip("letting survivors report needs MPICH hydra's -disable-auto-cleanup")
        cmd += ["-disable-auto-cleanup"]
    cmd += ["-n", str(n), sys.executable, WORKER] + args
    env = child_env(OMP_NUM_THREADS="1")
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=ROOT, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd[-3:])} on {n} ranks hung past {timeout} s: {e.stdout!r}")
    return p, time.monotonic() - t0


@pytest.mark.parametrize("n", [2, 4])
def test_sums_bitwise_shapes_dtypes_callbacks(n):
    # 8 keys (float32 padded, float64 split over ranks, float16, int32, int8, uint8, int64,
    # empty) x 2 devices x 3 rounds, bit for bit; SGD updater; init_key mismatch
    p, _ = _run(n, ["sums"], timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    # (ranks share the pipe: their lines may run together)
    oks = sorted(re.findall(r"rank (\d+) ok (\d+)", p.stdout))
    assert oks == [(str(r), "48") for r in range(n)], p.stdout + p.stderr


@pytest.mark.parametrize("n,victim,when", [(4, 2, "mid"), (2, 0, "before")])
def test_dead_rank_fails_the_others_cleanly(n, victim, when):
    p, took = _run(n, ["fault", str(victim), when], timeout=40, keep_going=True)
    reports = [json.loads(m) for m in re.findall(r"FAULT (\{.*?\})(?=FAULT|WHOLE|\n|$)", p.stdout)]
    # a rank whose round 2 completed before the victim died (it served its slice first,
    # which timing on a loaded machine allows) holds round 2 whole
    whole = [json.loads(m) for m in re.findall(r"WHOLE (\{.*?\})(?=FAULT|WHOLE|\n|$)", p.stdout)]
    assert all(w["whole_r2"] for w in whole), p.stdout
    assert sorted(r["rank"] for r in reports + whole) == [r for r in range(n) if r != victim], \
        p.stdout + p.stderr
    for r in reports:
        # MPI's own failure report, or the 3 s watchdog; never a hang
        assert r["waited"] < 20, r
        assert ("got no answer from the other ranks within 3 s" in r["error"]
                and r["waited"] >= 2.9 or "MPI reported rank" in r["error"]), r
        assert "a rank probably died" in r["error"] and "is whole at round 1" in r["error"], r
        assert r["pulled_whole_r1"] and r["served_whole"], r  # whole update or none
        assert r["later_calls_raise"], r
    assert p.returncode != 0
    assert took < 35


def test_nnet_dist_two_ranks_match_one_process():
    exe, kind = _mpiexec()
    script = os.path.join(ROOT, "examples", "neuralnet", "nnet_dist.py")
    args = [script, "--data", "synthetic", "--epochs", "3", "--timeout", "30"]
    env = child_env(OMP_NUM_THREADS="1")
    flags = ["--allow-run-as-root", "--oversubscribe"] if kind == "openmpi" else []
    one = subprocess.run([sys.executable] + args + ["--backend", "local"], capture_output=True,
                         text=True, timeout=60, env=env, cwd=ROOT)
    two = subprocess.run([exe] + flags + ["-n", "2", sys.executable] + args, capture_output=True,
                         text=True, timeout=60, env=env, cwd=ROOT, start_new_session=True)
    errs = {}
    for name, p in (("one", one), ("two", two)):
        assert p.returncode == 0, p.stdout + p.stderr
        m = re.search(r"ranks (\d): \d+ samples/s .* final test-err=([\d.]+)", p.stdout)
        assert m, p.stdout
        errs[name] = (int(m.group(1)), float(m.group(2)))
    assert errs["one"][0] == 1 and errs["two"][0] == 2
    # 4 well separated clusters (chance: 0.75); the 2-rank sums differ from one process's
    # only in rounding, so the error agrees within noise
    assert errs["one"][1] < 0.15 and errs["two"][1] < 0.15, errs
    assert abs(errs["one"][1] - errs["two"][1]) <= 0.02, errs
