"""Build of the compiled core: the Cython extensions _core and _blas, with OpenMP where the
compiler has it, and mshadow.cuda._cuda, which needs no CUDA to build (it opens CUDA at run time).

Nothing is generated or cythonized when this file is merely imported: the kernel header,
cythonize and the compiler all run inside the build commands. A build whose inputs have not
changed reuses the extension already next to the sources (``pip install -e .`` twice in a row
compiles once, and ``pip wheel .`` after it packs the same binary), so editable, wheel and
``build_ext --inplace`` rebuilds are cheap. Progress lines (``mshadow build: ...``) go to
stderr and, when pip hides that, to the terminal.

MSHADOW_NO_OPENMP=1 forces a single-threaded build; MSHADOW_DEBUG=1 builds without -O3 and
keeps symbols; MSHADOW_KEEP_SYMBOLS=1 keeps them in an -O3 build (for perf). Per-ISA
kernels (SSE2 baseline, AVX2, AVX-512 on x86-64; NEON on arm64) are compiled inside the
extension with target pragmas and chosen at import, so no -march flag is needed here. A
cross build takes its target from sysconfig (_PYTHON_HOST_PLATFORM and the target's
sysconfig data: .ci/arm64_check.sh builds for aarch64 so).
"""
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _open_tty():
    """The controlling terminal for progress lines, when pip hides our stderr.

    pip captures a build backend's output and shows it only with ``-v`` or on failure, so a
    default ``pip install`` of this package would sit silent through minutes of compiling.
    When stderr is not a terminal but the process has one (a person at a terminal ran pip),
    the progress lines also go to that terminal. CI logs, which have no terminal, get them
    on stderr only; MSHADOW_BUILD_QUIET=1 turns the terminal copy off.
    """
    if os.environ.get("MSHADOW_BUILD_QUIET") == "1" or os.name != "posix":
        return None
    try:
        if sys.stderr.isatty():
            return None                      # stderr is the terminal already
        return open("/dev/tty", "w")         # noqa: SIM115  kept for the build's lifetime
    except (OSError, ValueError, AttributeError):
        return None                          # no controlling terminal


_TTY = []


def _say(msg):
    """Progress line: on stderr (``setup.py build_ext``; pip shows it with ``-v``) and, when
    pip hides stderr, on the terminal (see _open_tty)."""
    line = f"mshadow build: {msg}\n"    # one write: lines from the -j threads stay whole
    sys.stderr.write(line)
    sys.stderr.flush()
    if not _TTY:
        _TTY.append(_open_tty())
    if _TTY[0] is not None:
        try:
            _TTY[0].write(line)
            _TTY[0].flush()
        except OSError:
            _TTY[0] = None


class _Heartbeat:
    """While a long step runs, say every ``every`` seconds that it still runs."""

    def __init__(self, what, every=30.0):
        import threading
        self.what, self.every, self.t0 = what, every, time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.every):
            _say(f"{self.what}: still compiling ({time.time() - self.t0:.0f} s)")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _compiler_accepts(cc, flags):
    """True if ``cc`` compiles and links a tiny OpenMP program with ``flags``."""
    src = "#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n"
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, "t.c")
        with open(c, "w") as f:
            f.write(src)
        try:
            r = subprocess.run(cc + [c, "-o", os.path.join(d, "t")] + flags,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            return False
        return r.returncode == 0


def _compiler_version(cc):
    """First line of ``cc --version`` (e.g. 'gcc (Debian 12.2.0-14) 12.2.0'), or ''."""
    try:
        r = subprocess.run(cc + ["--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr).strip() else ""


# the generated headers: (generator module, header), each written by the module's write()
_GENERATED = (("codegen_types", "dtypes_gen.h"), ("codegen_cpu", "kernels_gen.h"))


def _generate_kernels():
    """Write mshadow/include/mshadow/dtypes_gen.h from the dtype and reducer tables and
    kernels_gen.h from the operator table."""
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.join(here, "mshadow")
    sys.path.insert(0, pkg)
    try:
        for module, header in _GENERATED:
            spec = importlib.util.spec_from_file_location(module, os.path.join(pkg, module + ".py"))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            mod.write(os.path.join(pkg, "include", "mshadow", header))
            if module == "codegen_cpu":
                arch = _ARCH.get(_target_machine())
                _ISAS[:] = [isa for macro, isas in mod.ARCH_ISAS if macro == arch for isa in isas]
    finally:
        sys.path.remove(pkg)


_KERNELS_DONE = []
_ISAS = []   # the SIMD levels the kernels are compiled for (codegen_cpu.ARCH_ISAS, this target's)
# machine -> packet.h's architecture macro (codegen_cpu.ARCH_ISAS); others build plain C only
_ARCH = {"x86_64": "MS_X86", "amd64": "MS_X86", "i686": "MS_X86", "i386": "MS_X86",
         "aarch64": "MS_ARM64", "arm64": "MS_ARM64"}


def _target_machine():
    """The machine the extension is built for, not the host: a cross build (to aarch64, say)
    sets _PYTHON_HOST_PLATFORM, which sysconfig reports."""
    return sysconfig.get_platform().rsplit("-", 1)[-1].lower()


def _kernels():
    """Regenerate the headers once per run (build_py and build_ext both need it); an
    unchanged header keeps its mtime, so nothing recompiles."""
    if _KERNELS_DONE:
        return
    _KERNELS_DONE.append(True)
    paths = [os.path.join(HERE, "mshadow", "include", "mshadow", h) for _, h in _GENERATED]
    before = [os.path.getmtime(p) if os.path.exists(p) else None for p in paths]
    _generate_kernels()
    for (_, header), path, was in zip(_GENERATED, paths, before):
        _say(header + (" unchanged" if os.path.getmtime(path) == was else " generated"))


def _extensions():
    """The extensions, described lazily (numpy's include dir is read at build time)."""
    headers = sorted(glob.glob(os.path.join("mshadow", "include", "mshadow", "**", "*.h"),
                               recursive=True))
    common = dict(include_dirs=["mshadow/include"], depends=headers,
                  define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    # mshadow.cuda._cuda opens the CUDA libraries at run time (dlopen): no CUDA header or
    # library at build time, only libdl where glibc keeps dlopen apart (before 2.34)
    cuda = Extension("mshadow.cuda._cuda", sources=["mshadow/cuda/_cuda.pyx"],
                     depends=sorted(glob.glob(os.path.join("mshadow", "cuda", "*.pxd"))
                                    + glob.glob(os.path.join("mshadow", "cuda", "*.pxi"))),
                     libraries=["dl"] if sys.platform.startswith("linux") else [])
    return [Extension("mshadow._core", sources=["mshadow/_core.pyx"], **common),
            Extension("mshadow._blas", sources=["mshadow/_blas.pyx"], **common), cuda]


# extensions without OpenMP loops (no -fopenmp, no libgomp to link)
_SERIAL = {"mshadow.cuda._cuda"}


class BuildPy(build_py):
    """Generates the headers first, so wheels ship them with the others."""

    def run(self):
        _kernels()
        super().run()


class BuildExt(build_ext):
    """Codegen, cythonize, compile (or reuse an up-to-date in-place build), record build info."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:      # both extensions at once; _core is the long one
            self.parallel = min(2, os.cpu_count() or 1)

    def run(self):
        import numpy as np
        from Cython import __version__ as cython_version
        from Cython.Build import cythonize
        t0 = time.time()
        # setuptools' run() clears inplace while building; remember where the result goes
        self._to_source = bool(self.inplace or self.editable_mode)
        _kernels()
        for ext in self.extensions:
            if np.get_include() not in ext.include_dirs:
                ext.include_dirs.append(np.get_include())
        directives = {"language_level": 3, "embedsignature": True}
        # Cython's own staleness check also compares the .c with numpy's and scipy's .pxd
        # files, which a fresh isolated build env (pip) installs with new mtimes every time:
        # decide here instead, from our own Cython sources and a stamp of the settings.
        stamp = os.path.join(HERE, "build", "stamps", "cythonize.json")
        want = {"directives": directives, "cython": ".".join(cython_version.split(".")[:2]),
                "numpy_abi": np.__version__.split(".")[0]}
        try:
            with open(stamp) as f:
                settings_changed = json.load(f) != want
        except (OSError, ValueError):
            settings_changed = True
        for ext in self.extensions:
            base = os.path.splitext(ext.sources[0])[0]
            c_file, ext.sources[0] = base + ".c", base + ".pyx"
            # an extension's Cython sources are the .pyx/.pxi/.pxd files of its directory
            ours = [p for pat in ("*.pyx", "*.pxi", "*.pxd")
                    for p in glob.glob(os.path.join(HERE, os.path.dirname(base), pat))]
            newest_source = max(os.path.getmtime(p) for p in ours)
            if (self.force or settings_changed or not os.path.exists(c_file)
                    or os.path.getmtime(c_file) < newest_source):
                _say(f"cythonize {base}.pyx (Cython {cython_version})")
                # keep setuptools' Extension objects; take only the generated .c sources
                ext.sources[:] = cythonize([ext], include_path=["mshadow"], quiet=True, force=True,
                                           compiler_directives=directives)[0].sources
            else:
                _say(f"{c_file} up to date")
                ext.sources[:] = [c_file]
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        with open(stamp, "w") as f:
            json.dump(want, f)
        self._np_version = np.__version__
        super().run()
        _say(f"done in {time.time() - t0:.0f} s")

    def build_extensions(self):
        cc = self.compiler.compiler_so[:1] if hasattr(self.compiler, "compiler_so") else None
        msvc = self.compiler.compiler_type == "msvc"
        self._openmp = False
        for ext in self.extensions:
            if msvc:
                ext.extra_compile_args += ["/O2"]
                if os.environ.get("MSHADOW_NO_OPENMP") != "1" and ext.name not in _SERIAL:
                    ext.extra_compile_args += ["/openmp"]
                    self._openmp = True
                continue
            debug = os.environ.get("MSHADOW_DEBUG") == "1"
            if not debug:
                ext.extra_compile_args += ["-O3"]
                if (sys.platform.startswith("linux")
                        and os.environ.get("MSHADOW_KEEP_SYMBOLS") != "1"):
                    ext.extra_link_args += ["-Wl,--strip-all"]   # no debug info in the .so
            # -fwrapv: integer overflow wraps as in mshadow's C++ on every compiler we use;
            # -ffp-contract=off: no FMA contraction, so packet and plain paths agree bit for bit.
            # -Werror=implicit-function-declaration: a kernel missing on one architecture fails
            # the build there, not the import.
            ext.extra_compile_args += ["-fno-strict-aliasing", "-fwrapv", "-ffp-contract=off",
                                       "-Wno-unused-function", "-Wno-unused-variable",
                                       "-Werror=implicit-function-declaration",
                                       "-fopenmp-simd"]   # the kernels' `omp simd` loops
            if _ARCH.get(_target_machine()) == "MS_X86":
                ext.extra_compile_args += ["-msse2"]
            if ext.name in _SERIAL:
                continue
            if os.environ.get("MSHADOW_NO_OPENMP") != "1" and cc and _compiler_accepts(cc, ["-fopenmp"]):
                ext.extra_compile_args += ["-fopenmp"]
                ext.extra_link_args += ["-fopenmp"]
                self._openmp = True
            else:
                _say("building without OpenMP (single-threaded)")
        self._cc = (shutil.which(cc[0]) or cc[0]) if cc else self.compiler.compiler_type
        self._cc_version = _compiler_version(cc) if cc else ""
        self._reused = set()
        super().build_extensions()
        self._write_build_info()

    # -- reuse of an up-to-date in-place build ----------------------------------------
    def _fingerprint(self, ext):
        """What the binary depends on besides its sources' mtimes: compiler, flags, numpy ABI."""
        import numpy as np
        return {"cc": self._cc, "cc_version": self._cc_version,
                "compile": list(ext.extra_compile_args), "link": list(ext.extra_link_args),
                "macros": [list(m) for m in ext.define_macros],
                "numpy_abi": np.__version__.split(".")[0], "python": sys.version}

    def _stamp_path(self, ext):
        name = os.path.basename(self.get_ext_filename(self.get_ext_fullname(ext.name)))
        return os.path.join(HERE, "build", "stamps", name + ".json")

    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        # The binary next to the sources (an editable or build_ext --inplace build) serves
        # every build of these same inputs: ``pip wheel .`` after ``pip install -e .`` copies
        # it into the wheel instead of compiling again, when its stamp says it was built from
        # this compiler, these flags and this numpy ABI, and it is newer than every source.
        inplace_file, _ = self._get_inplace_equivalent(
            self.get_finalized_command("build_py"), ext)
        stamp = self._stamp_path(ext)
        fp = self._fingerprint(ext)
        deps = list(ext.sources) + list(ext.depends)
        if inplace_file and os.path.exists(inplace_file) and os.path.exists(stamp) \
                and not self.force:
            with open(stamp) as f:
                same = json.load(f) == fp
            newest = max(os.path.getmtime(p) for p in deps)
            if same and os.path.getmtime(inplace_file) >= newest:
                _say(f"{ext.name}: up to date, reusing {os.path.relpath(inplace_file, HERE)}")
                self._reused.add(ext.name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if os.path.abspath(inplace_file) != os.path.abspath(target):
                    shutil.copy2(inplace_file, target)
                return
        what = ""
        if ext.name == "mshadow._core":
            levels = ", ".join(i.upper().replace("AVX512", "AVX-512") for i in _ISAS)
            what = f"; kernels for {levels}" if levels else ""
            what += "; this takes minutes"
        _say(f"compiling {ext.name} with {self._cc} "
             f"({'OpenMP' if self._openmp else 'no OpenMP'}{what})")
        t0 = time.time()
        with _Heartbeat(ext.name):
            super().build_extension(ext)
        _say(f"{ext.name}: compiled in {time.time() - t0:.0f} s")
        if self._to_source:
            # the stamp describes the in-place binary: a build into build/ only (pip wheel)
            # leaves the record of the one next to the sources as it is
            os.makedirs(os.path.dirname(stamp), exist_ok=True)
            with open(stamp, "w") as f:
                json.dump(fp, f)

    def _write_build_info(self):
        """mshadow/_build_info.py: what built the binary (show_config's 'compiler' line)."""
        info = {"compiler": self._cc, "compiler_version": self._cc_version,
                "openmp": self._openmp, "numpy_build": self._np_version,
                "cython": __import__("Cython").__version__,
                "python": platform.python_version(), "platform": platform.platform()}
        text = ('"""Written by setup.py\'s build_ext: the toolchain that built this binary."""\n'
                f"BUILD_INFO = {info!r}\n")
        targets = [os.path.join(self.build_lib, "mshadow", "_build_info.py")]
        in_source = os.path.join(HERE, "mshadow", "_build_info.py")
        if len(self._reused) == len(self.extensions) and os.path.exists(in_source):
            with open(in_source) as f:   # nothing was compiled: the in-place record holds
                text = f.read()
        elif self._to_source:
            targets.append(in_source)
        for path in targets:
            try:
                with open(path) as f:
                    if f.read() == text:
                        continue
            except OSError:
                pass
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
