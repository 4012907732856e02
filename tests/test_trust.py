"""Regression tests for the engine's trust properties: memory freed while a GIL-free
evaluation uses it, per-thread kernel flags, overlap through different wrappers of one
buffer, operator names that are never reused, the build fingerprint, and bounded plan
caches. Anything that used to crash the interpreter runs in a subprocess, so a crash is
a failed test and not a dead pytest."""
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import mshadow as ms

PKG_DIR = os.path.dirname(os.path.abspath(ms.__file__))
ROOT = os.path.dirname(PKG_DIR)


def _run_py(code, timeout=120, pythonpath=ROOT, prelude=""):
    """Run ``prelude`` + ``code`` in a fresh interpreter that imports the mshadow under test."""
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="2")
    code = textwrap.dedent(prelude) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=pythonpath)


def _check_ok(out):
    assert out.returncode == 0, (f"child exited with {out.returncode}\n"
                                 f"stdout:\n{out.stdout[-2000:]}\nstderr:\n{out.stderr[-2000:]}")
    assert "OK" in out.stdout, out.stdout + out.stderr


# ---- memory freed during a GIL-free evaluation ---------------------------------------------

# The child starts an assignment in a thread, waits a little (the evaluation runs without the
# GIL, so the main thread gets it back) and then frees a tensor that evaluation uses. Before
# the fix the bytes were unmapped under the running kernel (SIGSEGV). Now the free is
# deferred: it returns at once, later uses raise FreedTensorError, and the result is right.
_FREE_PRELUDE = """
import threading, time
import numpy as np
import mshadow as ms

def race(start, free, delays=(0.0, 0.001, 0.003, 0.006, 0.012)):
    '''start(): an assignment (run in a thread); free(): frees something it uses.
    Yields (thread error or None, whether free returned before the thread ended).'''
    for d in delays:
        box = {}
        def work():
            try:
                start()
            except BaseException as e:   # a free before the run started: a typed error
                box["err"] = e
            box["end"] = time.perf_counter()
        th = threading.Thread(target=work)
        th.start()
        time.sleep(d)
        freed_at = time.perf_counter()   # free() holds the GIL: the run's checks are done
        free()
        th.join()
        yield box.get("err"), freed_at < box["end"]
"""


def test_free_source_while_evaluating():
    _check_ok(_run_py(prelude=_FREE_PRELUDE, code="""
    want = np.float32(np.exp(np.float32(0.5))) * np.float32(0.5)
    hit = 0
    for rep in range(2):
        s = ms.new_tensor((3000, 3000), 0.5)
        t = ms.new_tensor((3000, 3000))
        t[:] = ms.F(ms.op.exp, s) * s          # compile the plan before the race
        t[:] = 0
        for err, during in race(lambda: t.__setitem__(slice(None), ms.F(ms.op.exp, s) * s),
                                lambda: ms.free_space(s)):
            if err is None:
                a = t.numpy()
                assert np.array_equal(a, np.full_like(a, want)), a
                hit += during
            else:
                assert isinstance(err, ms.FreedTensorError), repr(err)
            try:
                s.numpy()
            except ms.FreedTensorError:
                pass
            else:
                raise AssertionError("a freed tensor is still usable")
            s = ms.new_tensor((3000, 3000), 0.5)
            t[:] = 0
    assert hit, "the free never happened while an evaluation ran"
    print("OK", hit)
    """))


def test_free_destination_while_evaluating():
    _check_ok(_run_py(prelude=_FREE_PRELUDE, code="""
    s = ms.new_tensor((3000, 3000), 0.25)
    keep = s.numpy().copy()
    for rep in range(2):
        t = ms.new_tensor((3000, 3000))
        t[:] = ms.F(ms.op.exp, s) * s
        box = {"t": t}
        def free():
            ms.free_space(box["t"])
        for err, during in race(lambda: box["t"].__setitem__(slice(None), ms.F(ms.op.exp, s) * s),
                                free, delays=(0.002,)):
            assert err is None or isinstance(err, ms.FreedTensorError), repr(err)
        try:
            t[:] = 1
        except ms.FreedTensorError:
            pass
        else:
            raise AssertionError("a freed destination is still writable")
    assert np.array_equal(s.numpy(), keep)   # the source was only read
    # the freed destinations' memory really is released once the runs end: allocating
    # again many times over does not run out (a leak of 36 MB per free would show)
    for _ in range(20):
        t = ms.new_tensor((3000, 3000))
        t[:] = ms.F(ms.op.exp, s) * s
        ms.free_space(t)
    print("OK")
    """))


def test_free_dot_operand_while_multiplying():
    _check_ok(_run_py(prelude=_FREE_PRELUDE, code="""
    rng = np.random.default_rng(0)
    an = rng.standard_normal((1500, 1500)).astype(np.float32)
    bn = rng.standard_normal((1500, 1500)).astype(np.float32)
    want = an.astype(np.float64) @ bn.astype(np.float64)
    c = ms.new_tensor((1500, 1500))
    hit = 0
    for rep in range(4):
        a = ms.new_tensor((1500, 1500)); a.numpy()[...] = an
        b = ms.new_tensor((1500, 1500)); b.numpy()[...] = bn
        c[:] = 0
        junk = []

        def free():
            ms.free_space(a)
            # 9 MB may come from the heap, not a mapping of its own: then freed bytes stay
            # readable, so overwrite whatever memory is handed out next with NaN
            junk.extend(ms.new_tensor((1500, 1500), np.nan) for _ in range(3))
        for err, during in race(lambda: c.__setitem__(slice(None), ms.dot(a, b)),
                                free, delays=(0.005 + 0.01 * rep,)):
            if err is None:
                assert np.allclose(c.numpy(), want, rtol=1e-3, atol=1e-2), (
                    rep, np.abs(c.numpy() - want).max())
                hit += during
            else:
                assert isinstance(err, ms.FreedTensorError), repr(err)
        try:
            ms.dot(a, b)
            c[:] = ms.dot(a, b)
        except ms.FreedTensorError:
            pass
        else:
            raise AssertionError("a freed dot operand is still usable")
    assert hit, "the free never happened while the product ran"
    print("OK", hit)
    """))


@pytest.mark.parametrize("how", ["resize", "release"])
def test_container_reallocated_while_evaluating(how):
    _check_ok(_run_py(prelude=_FREE_PRELUDE, code=f"""
    want = np.float32(np.exp(np.float32(0.5))) * np.float32(0.5)
    t = ms.new_tensor((3000, 3000))
    hit = 0
    for rep in range(2):
        box = {{}}
        def fresh():
            box["c"] = ms.TensorContainer((3000, 3000), 0.5)
        fresh()
        t[:] = ms.F(ms.op.exp, box["c"]) * box["c"]
        for d in (0.0, 0.002, 0.006):
            t[:] = 0
            c = box["c"]
            def mutate():
                if "{how}" == "resize":
                    c.resize((4000, 4000))   # bigger: new memory, the old one freed
                else:
                    c.release()
            for err, during in race(lambda: t.__setitem__(slice(None), ms.F(ms.op.exp, c) * c),
                                    mutate, delays=(d,)):
                if err is None:
                    a = t.numpy()
                    assert np.array_equal(a, np.full_like(a, want)), a
                    hit += during
                else:   # changed before the run: a typed error, nothing written
                    assert isinstance(err, (ms.MShadowError, ValueError)), repr(err)
            if "{how}" == "resize":
                assert c.shape == ms.Shape(4000, 4000)
                c[:] = 7.0
                assert float(c.numpy()[3999, 3999]) == 7.0
            else:
                assert c.shape[0] == 0
            fresh()
    assert hit, "the container never changed while an evaluation ran"
    print("OK", hit)
    """))


# ---- per-thread kernel flags ---------------------------------------------------------------

def _hammer(bad, good, n=60):
    """Run ``bad`` n times in one thread and ``good`` in another until ``bad`` is done (at
    least n times). Returns good's exceptions and the messages of bad's."""
    errors, raised = [], []
    go = threading.Barrier(2)
    done = threading.Event()

    def run_bad():
        go.wait()
        try:
            for _ in range(n):
                try:
                    bad()
                except (RuntimeWarning, IndexError) as e:
                    raised.append(str(e))
        finally:
            done.set()

    def run_good():
        go.wait()
        k = 0
        while k < n or not done.is_set():
            k += 1
            try:
                good()
            except Exception as e:   # noqa: BLE001  any exception here is the bug
                errors.append(e)
    threads = [threading.Thread(target=run_bad), threading.Thread(target=run_good)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors, raised


def test_integer_division_flag_is_per_thread():
    n = 1 << 18   # long enough to run without the GIL, on the engine's threads
    num = ms.from_numpy(np.arange(n, dtype=np.int32))
    zero = ms.new_tensor((n,), 0, dtype=np.int32)
    three = ms.new_tensor((n,), 3, dtype=np.int32)
    q_bad = ms.new_tensor((n,), dtype=np.int32)
    q_good = ms.new_tensor((n,), dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a warning raises in its own thread
        with pytest.raises(RuntimeWarning, match="integer division by zero"):
            q_bad[:] = num / zero
        errors, raised = _hammer(lambda: q_bad.__setitem__(slice(None), num / zero),
                                 lambda: q_good.__setitem__(slice(None), num / three))
    assert not errors, errors[:3]
    assert np.array_equal(q_good.numpy(), np.arange(n, dtype=np.int32) // 3)
    assert not q_bad.numpy().any()      # x / 0 gives 0


def test_gather_out_of_range_flag_is_per_thread():
    # Indices are checked before a run; one goes out of range in the kernel only when the
    # index tensor changes during the run (a third thread writes it). That gather raises
    # IndexError; short gathers another thread runs meanwhile (with the GIL, while the long
    # one runs without it) must not.
    rows = 1 << 18
    src = ms.from_numpy(np.arange(rows * 4, dtype=np.float32).reshape(rows, 4))
    flip = np.arange(rows, dtype=np.float32)
    bad_idx = ms.from_numpy(flip)
    out_bad = ms.new_tensor((rows, 4))
    small = 1024     # 4096 elements: too few to release the GIL
    good_idx = ms.from_numpy(np.arange(small, dtype=np.float32)[::-1].copy())
    out_good = ms.new_tensor((small, 4))
    stop = threading.Event()
    s0, s1, s2, s3 = (slice(rows * k // 5, rows * k // 5 + 256) for k in range(1, 5))
    o0, o1, o2, o3 = (flip[s].copy() for s in (s0, s1, s2, s3))
    big = np.float32(rows + 5)
    junk = np.ones(64)

    def writer():
        # The GIL changes hands only at calls and loop edges, where the index is in range,
        # so the checks pass; a run without the GIL reads the out-of-range windows.
        while not stop.is_set():
            flip[s0] = big; flip[s1] = big; flip[s2] = big; flip[s3] = big  # noqa: E702
            _ = (junk + junk + junk + junk + junk + junk + junk + junk + junk + junk + junk
                 + junk + junk + junk + junk + junk + junk + junk + junk + junk + junk)
            flip[s0] = o0; flip[s1] = o1; flip[s2] = o2; flip[s3] = o3  # noqa: E702
    threads, switch = ms.get_num_threads(), sys.getswitchinterval()
    ms.set_num_threads(1)
    sys.setswitchinterval(1e-5)   # the GIL changes hands often: the short gathers interleave
    wt = threading.Thread(target=writer)
    wt.start()
    try:
        errors, raised = _hammer(
            lambda: out_bad.__setitem__(slice(None), ms.take(bad_idx, src)),
            lambda: out_good.__setitem__(slice(None), ms.take(good_idx, src)), n=100)
    finally:
        stop.set()
        wt.join()
        sys.setswitchinterval(switch)
        ms.set_num_threads(threads)
    assert not errors, errors[:3]
    assert np.array_equal(out_good.numpy(), src.numpy()[small - 1::-1])
    if not any("during evaluation" in r for r in raised):
        # the check before each run caught every change: the race needs a run without the
        # GIL to start between the writer's two stores, which a loaded machine may not give
        pytest.skip("the index never changed during a run in 100 tries on this machine")


# ---- overlap through different wrappers of the same memory ---------------------------------

def test_shifted_rows_of_one_numpy_array():
    a = np.arange(2400, dtype=np.float32).reshape(600, 4)
    want = a.copy()
    want[1:599] = want[0:598] + 1
    ms.from_numpy(a[1:599])[:] = ms.from_numpy(a[0:598]) + 1
    assert np.array_equal(a, want)


def _square(n=64, dtype=np.float32):
    t = ms.new_tensor((n, n), dtype=dtype)
    t.numpy()[...] = np.arange(n * n, dtype=dtype).reshape(n, n)
    return t, t.numpy().copy()


def test_transpose_through_numpy_wrapper():
    t, a = _square()
    t[:] = ms.from_numpy(t.numpy()).T
    assert np.array_equal(t.numpy(), a.T)


def test_transpose_through_dlpack_wrapper():
    t, a = _square()
    t[:] = ms.from_dlpack(t).T
    assert np.array_equal(t.numpy(), a.T)


def test_transpose_through_asarray_operand():
    t, a = _square()
    t[:] = ms.from_numpy(np.asarray(t)).T + 1
    assert np.array_equal(t.numpy(), a.T + 1)


def test_plain_numpy_operand_overlapping_destination():
    buf = np.arange(2400, dtype=np.float32)
    want = buf.copy()
    want[1:2000] = want[1:2000] * 2 + want[0:1999]
    dst = ms.from_numpy(buf[1:2000])
    dst[:] = dst * 2 + buf[0:1999]   # the array is an operand of the lazy expression
    assert np.array_equal(buf, want)


def test_implicit_dot_reading_destination_wrapper():
    t, a = _square(32, np.float64)
    other = np.arange(32 * 32, dtype=np.float64).reshape(32, 32) % 7
    t[:] = ms.implicit_dot(ms.from_numpy(t.numpy()), ms.from_numpy(other))
    assert np.array_equal(t.numpy(), a @ other)


def test_transpose_axes_reading_destination_wrapper():
    t = ms.new_tensor((8, 8, 8))
    a = np.arange(512, dtype=np.float32).reshape(8, 8, 8)
    t.numpy()[...] = a
    t[:] = ms.transpose_axes(ms.from_numpy(t.numpy()), (2, 0, 1))
    assert np.array_equal(t.numpy(), a.transpose(2, 0, 1))


def test_take_reading_destination_wrapper():
    t, a = _square()
    idx = ms.from_numpy(np.arange(64, dtype=np.float32)[::-1].copy())
    t[:] = ms.take(idx, ms.from_numpy(t.numpy()))
    assert np.array_equal(t.numpy(), a[::-1])


def test_disjoint_column_halves_of_one_array():
    a = np.arange(600 * 8, dtype=np.float32).reshape(600, 8)
    want = a.copy()
    want[:, 4:] = want[:, :4] * 3 - 1
    ms.from_numpy(a[:, 4:])[:] = ms.from_numpy(a[:, :4]) * 3 - 1
    assert np.array_equal(a, want)


# ---- user operators are never confused with each other -------------------------------------

def _scaled(alpha):
    @ms.op.define
    def leaky(a):
        return ms.op.where(a > 0, a, a * alpha)
    return leaky


def test_defined_operators_with_reused_ids():
    x = ms.from_numpy(np.array([-1.0, 2.0, -3.0, 0.5], dtype=np.float32))
    y = ms.new_tensor((4,))
    for alpha in (0.1, 0.2, 0.3, 0.4):
        y[:] = ms.F(_scaled(alpha), x)   # the operator dies here; its id comes back
        want = np.where(x.numpy() > 0, x.numpy(), x.numpy() * np.float32(alpha))
        assert np.array_equal(y.numpy(), want), (alpha, y.numpy())


def test_fifty_operators_defined_in_a_loop():
    xn = np.linspace(-2, 2, 9, dtype=np.float32)
    x = ms.from_numpy(xn)
    y = ms.new_tensor((9,))
    def make(k):
        def body(a):
            return a * k + 1
        return ms.op.define(body)
    for k in range(50):
        y[:] = ms.F(make(k), x)
        assert np.array_equal(y.numpy(), xn * np.float32(k) + np.float32(1)), k


# ---- the build fingerprint -----------------------------------------------------------------

def test_fingerprint_matches_the_build():
    from mshadow import codegen_cpu
    out = _run_py("""
    import mshadow as ms
    from mshadow import codegen_cpu
    print("OK", codegen_cpu.fingerprint())
    """)
    _check_ok(out)
    assert out.stdout.split()[1] == codegen_cpu.fingerprint()
    assert issubclass(ms.errors.BuildMismatchError, ImportError)
    assert issubclass(ms.errors.BuildMismatchError, ms.MShadowError)


def test_import_refuses_edited_generator_sources(tmp_path):
    pkg = tmp_path / "mshadow"
    shutil.copytree(PKG_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.c"))
    # A wheel repaired by auditwheel keeps the libraries it bundled (libgomp) in a sibling
    # directory, mshadow.libs/, that the extensions find through their RPATH ($ORIGIN/..):
    # the copy needs it beside it too, or the import fails before any check runs.
    libs = os.path.join(ROOT, "mshadow.libs")
    if os.path.isdir(libs):
        shutil.copytree(libs, tmp_path / "mshadow.libs")
    src = (pkg / "codegen_cpu.py").read_text()
    old = 'CHAIN_BINARY = ("plus", "minus", "mul", "div", "maximum", "minimum")'
    assert old in src
    # swapped step codes: a stale build would now run "mul" for "plus" and the reverse
    (pkg / "codegen_cpu.py").write_text(src.replace(
        old, 'CHAIN_BINARY = ("mul", "minus", "plus", "div", "maximum", "minimum")'))
    out = _run_py("""
    import numpy as np
    try:
        import mshadow as ms
    except ImportError as e:
        # the package did not import, so check the class by name and module
        assert type(e).__name__ == "BuildMismatchError", repr(e)
        assert type(e).__module__ == "mshadow.errors", type(e).__module__
        assert "rebuild" in str(e), str(e)
        print("OK refused")
    else:
        x = ms.new_tensor((4,), 3.0)
        y = ms.new_tensor((4,))
        y[:] = (x + 2) * 2
        print("imported", ms.__file__, y.numpy())
    """, pythonpath=str(tmp_path))
    _check_ok(out)


# ---- bounded plan caches -------------------------------------------------------------------

def _nested(leaves, shape_bits):
    """A distinct expression structure per ``shape_bits``: a chain of + and * over the
    leaves, choosing the operator and the operand order from the bits."""
    e = leaves[0]
    want = leaves[0].numpy().astype(np.float64)
    for k in range(11):
        b = (shape_bits >> k) & 1
        leaf = leaves[1 + k % (len(leaves) - 1)]
        ln = leaf.numpy().astype(np.float64)
        if b:
            e, want = e * leaf, want * ln
        else:
            e, want = leaf + e, ln + want
    return e, want


def test_plan_cache_is_bounded():
    info = ms.plan_cache_info()
    assert set(info._fields) >= {"hits", "misses", "maxsize", "currsize"}
    old_size = info.maxsize
    rng = np.random.default_rng(1)
    leaves = [ms.from_numpy(rng.uniform(0.5, 1.0, 6).astype(np.float32)) for _ in range(4)]
    dst = ms.new_tensor((6,))
    try:
        ms.clear_plan_cache()
        assert ms.plan_cache_info().currsize == 0
        ms.set_plan_cache_size(256)
        for bits in range(2048):
            for depth_extra in (0, 1):   # 2048 structures x 2 = 4096 distinct plans
                e, want = _nested(leaves, bits)
                if depth_extra:
                    e, want = e - leaves[1], want - leaves[1].numpy()
                dst[:] = e
                if bits % 97 == 0:
                    np.testing.assert_allclose(dst.numpy(), want, rtol=1e-5)
                    info = ms.plan_cache_info()
                    assert info.maxsize == 256 and info.currsize <= 256, info
        info = ms.plan_cache_info()
        assert info.currsize <= 256 and info.misses >= 3000, info
        # shrinking drops the least recently used plans at once
        ms.set_plan_cache_size(10)
        assert ms.plan_cache_info().currsize <= 10
        with pytest.raises(ValueError):
            ms.set_plan_cache_size(0)
        # an evicted structure compiles again and still gives the right value
        e, want = _nested(leaves, 5)
        dst[:] = e
        np.testing.assert_allclose(dst.numpy(), want, rtol=1e-5)
    finally:
        ms.set_plan_cache_size(old_size)
        ms.clear_plan_cache()
