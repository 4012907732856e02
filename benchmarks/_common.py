"""Timing helpers shared by the benchmark scripts: best-of-N, aligned buffers, tables."""
import gc
import os
import platform
import subprocess
import time

import numpy as np


def best_of(fn, repeat=5, number=None, min_time=0.02, warmup=2, long_call=1e-3, long_repeat=15):
    """Best seconds per call of ``fn()`` over ``repeat`` samples (time.perf_counter).

    Each sample runs ``fn`` ``number`` times in a row; with ``number=None`` it is chosen so
    that one sample lasts about ``min_time`` seconds (at least one call). ``warmup`` calls
    run first (plan compilation, page faults, caches). The garbage collector is off while
    timing. Best-of, not mean: the minimum is the figure least disturbed by other load.
    Calls longer than ``long_call`` seconds are timed one per sample, ``long_repeat`` samples.
    """
    for _ in range(warmup):
        fn()
    if number is None:
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        number = max(1, int(min_time / one)) if one > 0 else 1000
        number = min(number, 100000)
        if one > long_call:
            # long calls: time each one alone, and more of them, so that a call that ran
            # while no other process held a core can be found (a descheduled OpenMP thread
            # costs a whole scheduler tick, and one such call spoils a sample of several)
            number, repeat = 1, max(repeat, long_repeat)
    was = gc.isenabled()
    gc.disable()
    try:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            dt = (time.perf_counter() - t0) / number
            best = min(best, dt)
    finally:
        if was:
            gc.enable()
    return best


def aligned_empty(n, dtype, align=64):
    """A 1-D numpy array of ``n`` elements whose data pointer is ``align``-byte aligned."""
    dtype = np.dtype(dtype)
    raw = np.empty(n * dtype.itemsize + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    a = raw[off:off + n * dtype.itemsize].view(dtype)
    assert a.ctypes.data % align == 0
    return a


def fmt_time(sec):
    """A time with a unit that keeps 3-4 significant digits."""
    if sec != sec or sec is None:
        return "-"
    if sec < 1e-3:
        return f"{sec * 1e6:.2f} us"
    if sec < 1:
        return f"{sec * 1e3:.3f} ms"
    return f"{sec:.3f} s"


def fmt_ratio(r):
    if r is None or r != r:
        return "-"
    return f"{r:.2f}x"


def print_table(title, header, rows, notes=()):
    """Print a fixed-width table: ``rows`` are lists of already formatted strings."""
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = "  ".join("-" * w for w in widths)
    print()
    print(title)
    print(line)
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(header, widths))))
    print(line)
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print(line)
    for n in notes:
        print("  " + n)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nproc():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def busy_elsewhere(seconds=0.5):
    """Fraction of all CPUs busy while this process sleeps (other users' load), from /proc/stat."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]          # total, idle + iowait
    try:
        t0, i0 = snap()
        time.sleep(seconds)
        t1, i1 = snap()
        return 1.0 - (i1 - i0) / max(1, t1 - t0)
    except (OSError, ValueError, IndexError):
        return float("nan")


def loadavg():
    try:
        return "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "?"


def numpy_simd():
    """numpy's version and the SIMD level its float32 exp/tanh loops run at, with the
    environment that lowers levels (numpy 2.4 names x86 levels X86_V3 / X86_V4: the
    older AVX512F / AVX512_SKX names in NPY_DISABLE_CPU_FEATURES leave AVX-512 on)."""
    try:
        from numpy.lib.introspect import opt_func_info
        level = opt_func_info(func_name="^tanh$", signature="float32")["tanh"]["ff"]["current"]
    except (ImportError, KeyError, TypeError):
        level = "?"
    env = [f"{k}={os.environ[k]!r}" for k in ("NPY_DISABLE_CPU_FEATURES",
                                               "MSHADOW_DISABLE_CPU_FEATURES")
           if os.environ.get(k)]
    return f"numpy {np.__version__}, float32 tanh at {level}" + (
        f"; {', '.join(env)}" if env else "")


def print_machine(warning=None):
    """Print the machine line every benchmark opens with (CPU, cores, load, how busy the
    CPUs are with other work, numpy's SIMD level) and, when they are busy, ``warning``;
    returns that share."""
    busy = busy_elsewhere()
    print(f"machine : {cpu_model()}, {nproc()} cores (nproc), load avg {loadavg()}, "
          f"{busy * 100:.0f}% of the CPUs busy with other work at start")
    print(f"numpy   : {numpy_simd()}")
    if busy > 0.1 and warning:
        print(f"WARNING : other processes are using the CPUs; {warning}")
    return busy


def git_rev(path):
    """The short commit of the checkout at ``path`` (``+dirty`` with local changes), or "?"."""
    try:
        rev = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) if rev else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def add_timing_args(ap, quick_help, rounds, row_time):
    """The sampling options of the interleaved benchmarks (bench_ir.py, bench_nn.py):
    --quick, --rounds (default ``rounds``), --row-time (default ``row_time``, a (full,
    quick) pair) and --min-time; None where not given (each script fills its defaults)."""
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--rounds", type=int, default=None,
                    help=f"interleaved rounds per row, at least (default {rounds}; --quick 3)")
    ap.add_argument("--row-time", type=float, default=None,
                    help=f"more rounds (up to 4x --rounds) while a row has taken less than this "
                         f"many seconds (default {row_time[0]}; --quick {row_time[1]})")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds per sample, at least one call (default 0.02; --quick 0.005)")
