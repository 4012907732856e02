"""Build and run-time facts of this mshadow: ``ms.show_config()`` and ``python -m mshadow``.

Like ``np.show_config()``: version, compiler, SIMD compiled/detected, OpenMP threads, BLAS
and CUDA. Every probe is lazy and guarded, so a missing piece is reported, never raised.
"""
import os
import sys

# numpy's names for the x86 / ARM features worth reporting, lowest first
_SIMD_ORDER = ("SSE2", "SSE3", "SSSE3", "SSE41", "SSE42", "AVX", "F16C", "FMA3", "AVX2",
               "AVX512F", "AVX512BW", "AVX512VL", "AVX512DQ", "NEON", "ASIMD", "SVE", "VSX", "VX")
# /proc/cpuinfo flag -> numpy's name
_CPUINFO = {"sse2": "SSE2", "pni": "SSE3", "ssse3": "SSSE3", "sse4_1": "SSE41", "sse4_2": "SSE42",
            "avx": "AVX", "f16c": "F16C", "fma": "FMA3", "avx2": "AVX2", "avx512f": "AVX512F",
            "avx512bw": "AVX512BW", "avx512vl": "AVX512VL", "avx512dq": "AVX512DQ",
            "neon": "NEON", "asimd": "ASIMD", "sve": "SVE"}


def _core():
    from . import _core
    return _core


def _build_info():
    """The dict setup.py's build_ext recorded in mshadow/_build_info.py, or None."""
    try:
        from ._build_info import BUILD_INFO
    except ImportError:     # built by something other than setup.py's build_ext
        return None
    return BUILD_INFO if isinstance(BUILD_INFO, dict) else None


def _compiler():
    """The compiler that built the extension, as recorded at build time."""
    import platform
    info = _build_info()
    if info is None or not info.get("compiler"):
        import sysconfig
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        return (f"unknown: no build record (sysconfig CC is {os.path.basename(cc)}); "
                f"Python built with {platform.python_compiler()}")
    text = info.get("compiler_version") or os.path.basename(info["compiler"])
    text += f" ({info['compiler']}"
    text += ", OpenMP" if info.get("openmp") else ", no OpenMP"
    if info.get("numpy_build"):
        text += f", numpy {info['numpy_build']} headers"
    return text + ")"


def _simd_detected():
    feats = None
    try:
        import numpy as np
        mod = getattr(getattr(np, "_core", None), "_multiarray_umath", None)
        table = getattr(mod, "__cpu_features__", None)
        if table:
            feats = {k for k, v in table.items() if v}
    except Exception:   # a probe; any failure means "fall back to /proc/cpuinfo"
        feats = None
    if feats is None:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")):
                        feats = {_CPUINFO[w] for w in line.split(":", 1)[1].split() if w in _CPUINFO}
                        break
        except OSError:
            pass
    if not feats:
        return "unknown (no numpy CPU feature table, no /proc/cpuinfo)"
    listed = [f for f in _SIMD_ORDER if f in feats]
    return " ".join(listed) if listed else "none of " + " ".join(_SIMD_ORDER)


def _simd_compiled():
    info = getattr(_core(), "simd_info", None)
    if info is None:
        return "SSE2 baseline", None
    try:
        r = info()
    except Exception as e:
        return f"unknown (simd_info() failed: {e})", None
    if isinstance(r, dict):
        compiled = r.get("compiled") or r.get("baseline") or str(r)
        chosen = r.get("dispatched") or r.get("selected") or r.get("active")
        return (" ".join(compiled) if isinstance(compiled, (list, tuple)) else str(compiled),
                None if chosen is None else str(chosen))
    return str(r), None


def _core_detected():
    info = getattr(_core(), "simd_info", None)
    try:
        r = info() if info is not None else None
    except Exception:   # already reported on the "SIMD compiled" line
        return None
    return r.get("detected") if isinstance(r, dict) else None


def _threads():
    fn = getattr(_core(), "get_num_threads", None)
    shares = getattr(_core(), "thread_shares", None)
    if fn is not None:
        try:
            n = fn()
            text = f"{n} (mshadow._core.get_num_threads)"
            if n > 1 and shares is not None:
                s = shares()
                text += (f"; waking them takes {s['wake_us']:.1f} us, so a thread's share "
                         f"of a run moves at least {s['bytes'] / 1024:.0f} KiB")
                if s["past_cache_bytes"] < s["bytes"]:
                    text += (f", {s['past_cache_bytes'] / 1024:.0f} KiB for a run past the "
                             f"{s['cache_bytes'] / 1024:.0f} KiB cache (E1 moves "
                             f"{s['past_cache_bytes_a_ns']} bytes a ns from there)")
            return text
        except Exception as e:
            return f"unknown (get_num_threads() failed: {e})"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env.split(",")[0])
            if n > 0:
                return f"{n} (OMP_NUM_THREADS)"
        except ValueError:
            pass
    return f"{os.cpu_count() or 1} (os.cpu_count)"


def _blas():
    try:
        import scipy
    except ImportError:
        return "none (scipy not installed)"
    try:
        deps = scipy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name = deps.get("name", "unknown")
        version = deps.get("version", "")
        return f"{name} {version}".strip() + f" (scipy {scipy.__version__})"
    except Exception as e:
        return f"unknown (scipy {scipy.__version__}: {e})"


CUDA_NOT_BUILT = ("not built: this package has no GPU backend (mshadow.cuda); GPU support "
                  "needs that module and, at run time, an NVIDIA driver with NVRTC and cuBLAS")


def _cuda():
    import importlib
    try:
        cuda = importlib.import_module("mshadow.cuda")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("mshadow.cuda"):
            return CUDA_NOT_BUILT
        return f"unavailable (import mshadow.cuda failed: {e})"
    except Exception as e:
        return f"unavailable (import mshadow.cuda failed: {type(e).__name__}: {e})"
    driver = getattr(cuda, "driver", None)
    if driver is not None:
        try:
            drv = driver()
        except Exception as e:            # MSHADOW_CUDA names no driver
            return f"unavailable ({' '.join(str(e).split())})"
        if getattr(drv, "EMULATED", False):
            line = f"emulated device ({cuda.ENV}=emulate)"
            return line if drv.compiler() else line + ": no g++ to compile its kernels"
    try:
        ok = cuda.is_available()
    except Exception as e:
        return f"unavailable (is_available() failed: {type(e).__name__}: {e})"
    if isinstance(ok, tuple):         # (available, reason)
        ok, reason = ok[0], ok[1] if len(ok) > 1 else None
    else:
        reason = None
    if not ok:
        for attr in ("unavailable_reason", "reason", "load_error"):
            r = getattr(cuda, attr, None)
            if r is not None:
                reason = r() if callable(r) else r
                break
        reason = " ".join(str(reason).split()) if reason else None    # one line of output
        return "not available" + (f" ({reason})" if reason else "")
    parts = []
    for label, attr in (("driver", "driver_version"), ("NVRTC", "nvrtc_version"),
                        ("cuBLAS", "cublas_version"), ("devices", "device_count")):
        fn = getattr(cuda, attr, None)
        if fn is not None:
            try:
                parts.append(f"{label} {fn() if callable(fn) else fn}")
            except Exception as e:
                parts.append(f"{label} unknown ({' '.join(str(e).split())})")
    return "available" + (": " + ", ".join(parts) if parts else "")


def get_config():
    """The facts ``show_config`` prints, as an ordered dict of label -> text."""
    import platform
    import numpy as np
    from . import __version__
    compiled, dispatched = _simd_compiled()
    cfg = {
        "mshadow": __version__,
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "platform": f"{platform.system()} {platform.machine()} ({sys.platform})",
        "compiler": _compiler(),
        "numpy": np.__version__,
        "SIMD compiled": compiled,
    }
    if dispatched is not None:
        cfg["SIMD dispatched"] = dispatched
    cfg["SIMD detected"] = _simd_detected()
    core_seen = _core_detected()
    if core_seen:
        cfg["SIMD detected"] += f" (mshadow: {core_seen})"
    cfg["OpenMP threads"] = _threads()
    cfg["BLAS"] = _blas()
    cfg["CUDA"] = _cuda()
    return cfg


def show_config(file=None):
    """Print the build's facts: version, compiler, SIMD, OpenMP threads, BLAS, CUDA."""
    cfg = get_config()
    width = max(len(k) for k in cfg)
    out = file if file is not None else sys.stdout
    for k, v in cfg.items():
        print(f"{k + ':':<{width + 1}} {v}", file=out)
