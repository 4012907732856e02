"""Timing helpers shared by the benchmark scripts: interleaved rounds (measure), best-of-N,
aligned buffers, tables."""
import gc
import os
import platform
import statistics
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


def calibrate(fn, burst_time):
    """Calls per burst so that one burst lasts about ``burst_time`` (after two warm-up calls)."""
    fn()
    fn()
    k, t0 = 0, time.perf_counter()
    while True:
        fn()
        k += 1
        dt = time.perf_counter() - t0
        if dt >= min(burst_time, 2e-3) or k >= 1000:
            break
    return max(1, min(100000, int(burst_time / (dt / k))))


def measure(alts, rounds, min_time, row_time=0.0, bursts=5):
    """({name: median over rounds of seconds per call}, {name: interquartile range over the
    rounds / median}, rounds) of the callables in ``alts``.

    Interleaved: every round takes one sample of each alternative, in an order rotated each
    round; at least ``rounds`` rounds, more (up to 4x) while the row has taken less than
    ``row_time`` seconds (cheap rows get more rounds). A sample is the best of up to
    ``bursts`` bursts of calls (``min_time / bursts`` seconds each), stopping once it has
    lasted ``min_time``: a call longer than that is one call. The best burst of a sample is
    the one least slowed by other processes at that moment; the median over rounds then
    discards the rounds that were slowed throughout.
    """
    names = list(alts)
    number = {k: calibrate(alts[k], min_time / bursts) for k in names}
    samples = {k: [] for k in names}
    clock = time.perf_counter
    was = gc.isenabled()
    gc.disable()
    t_row = clock()
    try:
        for r in range(4 * rounds):
            if r >= rounds and clock() - t_row >= row_time:
                break
            s = r % len(names)
            for k in names[s:] + names[:s]:
                fn, m = alts[k], number[k]
                best, start = float("inf"), clock()
                for _ in range(bursts):
                    t0 = clock()
                    for _ in range(m):
                        fn()
                    t1 = clock()
                    best = min(best, (t1 - t0) / m)
                    if t1 - start >= min_time:
                        break
                samples[k].append(best)
    finally:
        if was:
            gc.enable()
    med = {k: statistics.median(v) for k, v in samples.items()}
    spread = {}
    for k, v in samples.items():
        q = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
        spread[k] = (q[2] - q[0]) / med[k]
    return med, spread, len(samples[names[0]]) if names else 0


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
