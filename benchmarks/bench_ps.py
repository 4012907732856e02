"""Push+pull throughput of mshadow.ps against a plain mpi4py Allreduce of the same buffer.

    mpiexec -n 4 python benchmarks/bench_ps.py            # 64 MB float32 gradient, 15 rounds
    mpiexec -n 4 python benchmarks/bench_ps.py --mb 8 --rounds 9

One round of each, interleaved (ps, Allreduce, ps, ...) so that load from
other processes hits all of them alike; a barrier before every timed operation; each time is
the slowest rank's (what a training step waits for). Prints medians, GB/s as buffer bytes /
time (the "algorithm bandwidth"), and ratios to Allreduce. Every result is checked against
the expected sum before timing starts. Needs mpi4py (pip install mpi4py mpich).
"""
import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

try:
    import mshadow as ms
except ImportError:  # run from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import mshadow as ms
from mpi4py import MPI


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=64.0, help="gradient size in MB (float32)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = int(args.mb * 2 ** 20) // 4
    grad = ms.new_tensor((n,), init=float(rank + 1))          # exactly summable values
    out = ms.new_tensor((n,))
    ref = np.empty(n, np.float32)
    expect = size * (size + 1) / 2

    model = ms.ps.create_shared_model("mpi", timeout=120)
    model.init_key(0, (n,), np.float32)                    # big: split over every rank

    def ps_round():
        model.push(grad, 0)
        model.pull_req(out, 0)
        model.pull_wait(0)

    def allreduce():
        comm.Allreduce(np.asarray(grad), ref, op=MPI.SUM)

    def timed(fn):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    cases = [("mshadow.ps push + pull_req + pull_wait", ps_round),
             ("mpi4py Allreduce", allreduce)]
    for name, fn in cases:                                   # warm up, and check
        fn()
        got = ref if "Allreduce" in name else np.asarray(out)
        if not (got == expect).all():
            raise SystemExit(f"rank {rank}: {name} gave a wrong sum")
        np.asarray(out)[:] = 0
    times = {name: [] for name, _ in cases}
    for _ in range(args.rounds):
        for name, fn in cases:
            times[name].append(timed(fn))
    model.close()
    if rank == 0:
        nbytes = n * 4
        base = statistics.median(times["mpi4py Allreduce"])
        print(f"# {size} ranks, {nbytes / 2**20:.0f} MB float32 gradient, {args.rounds} "
              f"interleaved rounds; {MPI.Get_library_version().splitlines()[0].strip()}; "
              f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus")
        print(f"{'operation':<40} {'median':>9} {'GB/s':>7} {'vs Allreduce':>12}")
        for name, _ in cases:
            t = statistics.median(times[name])
            print(f"{name:<40} {t * 1e3:7.1f}ms {nbytes / t / 1e9:7.2f} {t / base:11.2f}x")


if __name__ == "__main__":
    main()
