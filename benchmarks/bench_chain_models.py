"""Where E1 from DRAM loses against the C loop: mshadow against C models of its chain kernel.

    python benchmarks/bench_chain_models.py            # n = 1e7 float64, one thread
    python benchmarks/bench_chain_models.py --n 2e6 --rounds 31

E1 (w[:] = -eta * (g + lam * w)) over float64, one thread, in one process over the same numpy
buffers (numpy madvises large buffers to huge pages, which a C main with plain pages does
not get, and there every variant runs at one speed): mshadow's statement, cloop.c's vector
loop (the C loop of bench_elementwise.py) and the variants of chain_models.c, each the
kernel's loop shape with one of its choices taken away (its header says which). Every
variant is checked against numpy first; the table shows interleaved medians
(_common.measure) and each one's ratio to the C loop. AVX-512 machines only.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import aligned_empty, fmt_ratio, fmt_time, measure, print_machine, print_table  # noqa: E402
from bench_elementwise import build_cloop, ms  # noqa: E402  (mshadow, installed or this checkout)

MODELS = ("chain", "chain_nopf", "blocked", "blocked_nopf", "vector_nopf")
ETA, LAM = 0.1, 0.5


def build_models(tmpdir):
    so = os.path.join(tmpdir, "chain_models.so")
    subprocess.run(["gcc", "-O2", "-ffp-contract=off", "-shared", "-fPIC",
                    os.path.join(HERE, "chain_models.c"), "-o", so], check=True)
    lib = ctypes.CDLL(so)
    P, D, L = ctypes.c_void_p, ctypes.c_double, ctypes.c_long
    for name in MODELS:
        getattr(lib, name).argtypes = [P, P, D, D, L]
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e7, help="elements (a multiple of 64)")
    ap.add_argument("--rounds", type=int, default=21, help="interleaved rounds")
    args = ap.parse_args()
    n = int(args.n) // 64 * 64
    if ms.simd_info()["detected"] != "avx512":
        print("chain_models.c is AVX-512 code: this machine has", ms.simd_info()["detected"])
        return 0
    ms.set_num_threads(1)
    rng = np.random.default_rng(0)
    w, g = aligned_empty(n, np.float64), aligned_empty(n, np.float64)
    w[:], g[:] = rng.random(n), rng.random(n)
    W, G = ms.from_numpy(w), ms.from_numpy(g)
    with tempfile.TemporaryDirectory(prefix="ms_models_") as tmpdir:
        cl, _ = build_cloop(tmpdir)
        md = build_models(tmpdir)
        pw, pg = w.ctypes.data, g.ctypes.data
        alts = {"mshadow": lambda: W.__setitem__(slice(None), -ETA * (G + LAM * W)),
                # thr below n: its OpenMP-simd loop, vectorised (above it runs scalar)
                "C loop": lambda: cl.e1_f64(pw, pg, ETA, LAM, n, 1, 0)}
        for name in MODELS:
            alts[name] = (lambda f=getattr(md, name): f(pw, pg, LAM, -ETA, n))
        bad = []
        for name, fn in alts.items():
            w0 = w.copy()
            fn()
            if not np.allclose(w, -ETA * (g + LAM * w0), rtol=1e-13, atol=1e-15):
                bad.append(name)
            w[:] = w0
        if bad:
            print("WRONG:", ", ".join(bad))
            return 1
        print_machine()
        med, spread, rounds = measure(alts, args.rounds, 0.02)
    rows = [[k, fmt_time(med[k]), fmt_ratio(med[k] / med["C loop"]), f"{spread[k] * 100:.0f}%"]
            for k in alts]
    print_table(f"E1 float64, n = {n:.0e}, one thread: medians of {rounds} interleaved rounds",
                ["variant", "time", "/ C loop", "IQR"], rows,
                ["chain_models.c's header says what each variant takes away"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
