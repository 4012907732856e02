"""examples/cython builds against the installed mshadow (cimport mshadow, get_include) and its
kernels agree with numpy; typed memoryviews take or refuse tensors as their layout allows.

The example is built the way a user builds it: in a directory of its own, with this
interpreter and its environment as they are. The test sets no PYTHONPATH, so Cython finds
``mshadow/__init__.pxd`` only if the install (editable, wheel or sdist) puts it on sys.path
where a tool that searches directories can see it; a setuptools import-hook editable install
would fail here, as it failed for users."""
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import mshadow as ms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _have_compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0]) is not None


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    pytest.importorskip("Cython")
    if not _have_compiler():
        pytest.skip("no C compiler to build the Cython example")
    d = tmp_path_factory.mktemp("cython_example")
    for name in ("mshadow_kernels.pyx", "setup.py", "demo.py"):
        shutil.copy(os.path.join(ROOT, "examples", "cython", name), d)
    env = dict(os.environ, CFLAGS=os.environ.get("CFLAGS", "") + " -O0")   # a quick build
    seen = subprocess.run([sys.executable, "-c", "import mshadow; print(mshadow.__file__)"],
                          cwd=d, env=env, capture_output=True, text=True)
    if seen.returncode != 0 and not os.environ.get("PYTHONPATH"):
        # only an in-place build that pytest found through its own sys.path: nothing is
        # installed for a user's build to find, so there is no install to test
        pytest.skip("mshadow is not installed in this environment (pip install -e . or a "
                    "wheel), so a user's Cython build could not find it")
    assert seen.returncode == 0, seen.stderr[-2000:]
    assert os.path.samefile(seen.stdout.strip(), ms.__file__), (
        f"a build in a fresh directory imports {seen.stdout.strip()}, the tests {ms.__file__}")
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=d, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sys.path.insert(0, str(d))
    try:
        import mshadow_kernels
    finally:
        sys.path.remove(str(d))
    mshadow_kernels.build_dir, mshadow_kernels.build_env = str(d), env
    return mshadow_kernels


def test_demo_runs(kernels):
    out = subprocess.run([sys.executable, "demo.py"], cwd=kernels.build_dir,
                         env=kernels.build_env, capture_output=True, text=True, check=True).stdout
    assert "[21. 23. 25. 27. 29.]]" in out            # y = 2 * x + 1, x = 0..14
    assert "[ 25.  75. 125.]" in out                  # its row sums
    assert "BufferError: tensor of shape (3,5) has padded rows" in out
    assert out.rstrip().endswith("[2. 2. 2. 2. 2.]")


def _filled(shape, pad, seed):
    t = ms.new_tensor(shape, pad=pad)
    t.numpy()[...] = np.random.default_rng(seed).standard_normal(shape)
    return t


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 17)])
@pytest.mark.parametrize("xpad,ypad", [(False, False), (True, True), (True, False)])
def test_saxpy_through_cimport_matches_numpy(kernels, shape, xpad, ypad):
    x, y = _filled(shape, xpad, 1), _filled(shape, ypad, 2)
    want = np.float32(0.5) * x.numpy() + y.numpy()
    kernels.saxpy(0.5, x, y)
    np.testing.assert_array_equal(y.numpy(), want)


def test_saxpy_checks_its_inputs(kernels):
    x, y = ms.new_tensor((2, 3)), ms.new_tensor((2, 3))
    with pytest.raises(TypeError, match="float32"):
        kernels.saxpy(1.0, x, ms.new_tensor((2, 3), dtype=np.float64))
    with pytest.raises(ValueError, match="shapes differ"):
        kernels.saxpy(1.0, x, ms.new_tensor((3, 2)))
    with pytest.raises(TypeError):
        kernels.saxpy(1.0, x, None)
    ms.free_space(x)
    with pytest.raises(ms.FreedTensorError):
        kernels.saxpy(1.0, x, y)


def test_strided_memoryview_takes_padded_tensor(kernels):
    t = _filled((4, 5), True, 3)
    assert t.stride != 5
    np.testing.assert_allclose(kernels.row_sums(t), t.numpy().astype(np.float64).sum(1),
                               rtol=1e-12)
    ms.free_space(t)   # the memoryview inside row_sums was released


def test_contiguous_memoryview_refuses_padded_tensor(kernels):
    t = _filled((4, 5), True, 4)
    before = t.numpy().copy()
    with pytest.raises(BufferError, match="not C-contiguous"):
        kernels.scale_rows(t, 2.0)
    np.testing.assert_array_equal(t.numpy(), before)
    c = _filled((4, 5), False, 4)
    kernels.scale_rows(c, 2.0)
    np.testing.assert_array_equal(c.numpy(), before * 2)


def test_writable_memoryview_refuses_read_only_tensor(kernels):
    a = np.ones((2, 3), np.float32)
    a.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        kernels.scale_rows(ms.from_numpy(a), 2.0)
    assert kernels.row_sums(ms.from_numpy(a)).tolist() == [3.0, 3.0]   # const view: fine


def test_memoryview_of_wrong_dtype_refused(kernels):
    with pytest.raises(ValueError, match="dtype"):
        kernels.row_sums(ms.new_tensor((2, 3), dtype=np.float64))
