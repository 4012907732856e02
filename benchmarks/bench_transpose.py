"""A[:] = B + C.T: an element-wise statement reading a transposed tensor, against numpy's
np.add(b, c.T, out=a), torch.add(b, c.t(), out=a) and C loops (cloop_transpose.c: row by
row, and in 32 x 32 tiles), one thread, float32 and float64, at sizes where rows of a
power of two bytes put a column's elements in a few cache sets (1024, 2048) and where they
do not (1000, 1040). Medians of interleaved rounds; every result checked against numpy.

    python benchmarks/bench_transpose.py [--sizes 1000,1024,2048] [--rounds 7]
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import best_of, fmt_ratio, fmt_time, print_machine, print_table  # noqa: E402

import mshadow as ms  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SUFFIX = {np.float32: "f32", np.float64: "f64"}


def build_cloop(tmpdir):
    so = os.path.join(tmpdir, "cloop_transpose.so")
    subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC",
                    os.path.join(HERE, "cloop_transpose.c"), "-o", so], check=True)
    lib = ctypes.CDLL(so)
    for name in ("naive", "tiled"):
        for s in SUFFIX.values():
            getattr(lib, f"add_t_{name}_{s}").argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long]
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,1024,1040,2048")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    ms.set_num_threads(1)
    print_machine()
    print(f"mshadow {ms.__version__}, numpy {np.__version__}, "
          f"torch {torch.__version__ if torch else '-'}; one thread everywhere")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_cloop(tmp)
        for n in sizes:
            for dt in (np.float32, np.float64):
                rng = np.random.default_rng(n)
                B = ms.new_tensor((n, n), dtype=dt)
                C = ms.new_tensor((n, n), dtype=dt)
                A = ms.new_tensor((n, n), dtype=dt)
                b, c, a = B.numpy(), C.numpy(), A.numpy()
                b[:] = rng.random((n, n))
                c[:] = rng.random((n, n))
                want = b + c.T
                bc, cc = np.ascontiguousarray(b), np.ascontiguousarray(c)
                ac = np.empty_like(bc)
                s = SUFFIX[dt]
                alts = {
                    "mshadow": lambda: A.__setitem__(slice(None), B + C.T),
                    "numpy": lambda: np.add(b, c.T, out=a),
                    "C naive": lambda: getattr(lib, f"add_t_naive_{s}")(
                        ac.ctypes.data, bc.ctypes.data, cc.ctypes.data, n),
                    "C tiled": lambda: getattr(lib, f"add_t_tiled_{s}")(
                        ac.ctypes.data, bc.ctypes.data, cc.ctypes.data, n),
                }
                if torch is not None:
                    tb, tc, ta = (torch.from_numpy(x) for x in (bc, cc, ac))
                    alts["torch"] = lambda: torch.add(tb, tc.t(), out=ta)
                for name, fn in alts.items():   # every result checked first
                    a[:] = 0
                    ac[:] = 0
                    fn()
                    got = a if name in ("mshadow", "numpy") else ac
                    assert np.array_equal(got, want), (name, n, dt)
                times = {k: [] for k in alts}
                for _ in range(args.rounds):      # interleaved rounds
                    for k, fn in alts.items():
                        times[k].append(best_of(fn, repeat=3, min_time=0.01))
                med = {k: float(np.median(v)) for k, v in times.items()}
                ms_t = med["mshadow"]
                rows.append([f"{n} {s}"] + [fmt_time(med[k]) for k in alts]
                            + [fmt_ratio(ms_t / med[k]) for k in alts if k != "mshadow"])
        names = list(alts)
        print_table("A[:] = B + C.T, n x n, one thread",
                    ["case"] + names + [f"ms/{k}" for k in names if k != "mshadow"], rows,
                    notes=["numpy: np.add(b, c.T, out=a); torch: torch.add(b, c.t(), out=a); "
                           "C: cloop_transpose.c, gcc -O3 -march=native",
                           f"medians of {args.rounds} interleaved rounds (a round: best of 3)"])


if __name__ == "__main__":
    main()
