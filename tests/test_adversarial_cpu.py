"""Adversarial tests of the CPU engine against independent oracles (numpy on copies of the
inputs taken before the statement, hand-computed values, the documented semantics).

1. The destination read under every stage, through views and foreign wrappers of its own
   memory (docs/architecture.md section 5 and "The destination read under a stage": the
   result is what numpy computes from copies; nothing is half-written).
2. Threads racing free_space / resize / release against running assignments (docs/threads.md,
   docs/memory.md): each racing call completes correctly or raises a typed error; no crash,
   no hang, no half-written destination. Run in child Pythons so a crash fails a test.
3. Adversarial shapes, layouts, dtypes and payloads (sizes around SIMD widths, pitched and
   offset tensors, NaN / inf / -0.0, wrapping integers, float16 rounding per operator).
4. Bad input: every error is typed, says what was wrong, and writes nothing.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import mshadow as ms

SAVERS = ["=", "+=", "-=", "*=", "/="]
OLD_NUMPY = np.lib.NumpyVersion(np.__version__) < "2.1.0"   # no read-only DLPack
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ms.__file__)))


# ---- helpers ---------------------------------------------------------------------------------

def ms_save(dst, value, saver):
    if saver == "=":
        dst[:] = value
    elif saver == "+=":
        dst += value
    elif saver == "-=":
        dst -= value
    elif saver == "*=":
        dst *= value
    else:
        dst /= value


def np_save(view, value, saver):
    value = np.array(value, copy=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        _np_save(view, value, saver)


def _np_save(view, value, saver):
    if saver == "=":
        view[...] = value
    elif saver == "+=":
        view += value
    elif saver == "-=":
        view -= value
    elif saver == "*=":
        view *= value
    elif view.dtype.kind == "f":
        view /= value
    else:                                  # C division: truncation toward zero
        view[...] = np.trunc(view / value).astype(view.dtype)


def rand(shape, seed, dtype=np.float32, shift=3.0):
    """Values away from 0 (so /= is well conditioned)."""
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5 + shift).astype(dtype)


def tensor_of(a, pad=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pad)
    t[:] = a
    return t


def ref_pool(a, k, s, red=np.max):
    w = sliding_window_view(a, (k, k), axis=(-2, -1))[..., ::s, ::s, :, :]
    return red(w, axis=(-2, -1))


def ref_pad(a, p):
    return np.pad(a, [(0, 0)] * (a.ndim - 2) + [(p, p), (p, p)])


def ref_im2col(x, k, pad):
    x = ref_pad(x, pad)
    taps = sliding_window_view(x, (k, k), axis=(2, 3))          # (n, c, y, x, i, j)
    return taps.transpose(1, 4, 5, 0, 2, 3).reshape(x.shape[1] * k * k, -1)


def run_child(code, timeout=150, prelude=""):
    code = "import sys, threading\nimport numpy as np\nimport mshadow as ms\n" + \
        textwrap.dedent(prelude) + textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [PKG_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=PKG_ROOT)
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}")
    return proc.stdout


@pytest.fixture
def threads():
    old = ms.get_num_threads()
    yield ms.set_num_threads
    ms.set_num_threads(old)


# ============================================================================================
# 1. The destination read under every stage
# ============================================================================================

# how the statement reaches the base tensor's memory: the tensor itself, a numpy wrapper, a
# DLPack wrapper, a wrapper of the numpy view the tensor exports
WRAP = {
    "tensor": lambda b: b,
    "from_numpy": lambda b: ms.from_numpy(np.asarray(b)),
    "from_dlpack": lambda b: ms.from_dlpack(b),
    "numpy()": lambda b: ms.from_numpy(b.numpy()),
}

_I = lambda *v: ms.from_numpy(np.array(v, np.int32))      # noqa: E731
_REV6 = np.arange(6)[::-1].copy()

# name -> (shape, destination of the base (mshadow), the same view of a numpy array,
#          value built from a wrapper of the base, numpy oracle of the whole base copy)
ALIAS_CASES = {
    "pool_window_of_itself": (
        (2, 3, 8, 8), lambda d: ms.crop(d, (4, 4), 0, 0), lambda a: a[..., :4, :4],
        lambda s: ms.pool(s, 2, 2, 2, 2), lambda a: ref_pool(a, 2, 2)),
    "pool_of_pad": (
        (2, 3, 8, 8), lambda d: d, lambda a: a,
        lambda s: ms.pool(ms.pad(s, 1), 3, 3, 1, 1), lambda a: ref_pool(ref_pad(a, 1), 3, 1)),
    "sum_pool_of_pad_of_expr": (
        (2, 3, 8, 8), lambda d: d, lambda a: a,
        lambda s: ms.pool(ms.pad(s * 0.5, 1), 3, 3, 1, 1, ms.red.sum),
        lambda a: ref_pool(ref_pad(a * np.float32(0.5), 1), 3, 1, np.sum)),
    "unpool_of_pool": (
        (1, 2, 6, 6), lambda d: d, lambda a: a,
        lambda s: ms.unpool(s, ms.pool(s, 2, 2, 2, 2), ms.pool(s, 2, 2, 2, 2), 2, 2, 2, 2),
        lambda a: (lambda p: (a == p) * p)(np.repeat(np.repeat(ref_pool(a, 2, 2), 2, -1), 2, -2))),
    "col2im_of_im2col": (
        (1, 2, 6, 6), lambda d: d, lambda a: a,
        lambda s: ms.pack_col2patch(ms.unpack_patch2col(s, 3, 3, 1), (1, 2, 6, 6), 3, 3, 1),
        lambda a: a * _taps_per_pixel(6, 3)),
    "concat_swapped_halves": (
        (4, 6), lambda d: d, lambda a: a,
        lambda s: ms.concat(ms.slice_axis(s, 1, 3, 6), ms.slice_axis(s, 1, 0, 3), 1),
        lambda a: np.concatenate([a[:, 3:], a[:, :3]], 1)),
    "concat_rows_rotated": (
        (4, 6), lambda d: d, lambda a: a,
        lambda s: ms.concat(s.slice(1, 4), s.slice(0, 1) * 2, 0),
        lambda a: np.concatenate([a[1:], a[:1] * 2], 0)),
    "slice_shifted_down": (
        (9, 7), lambda d: d.slice(1, 9), lambda a: a[1:],
        lambda s: s.slice(0, 8) * 1, lambda a: a[:8]),
    "slice_shifted_up": (
        (9, 7), lambda d: d.slice(0, 8), lambda a: a[:8],
        lambda s: s.slice(1, 9) + 0, lambda a: a[1:]),
    "crop_overlapping": (
        (2, 8, 8), lambda d: ms.crop(d, (5, 5), 0, 0), lambda a: a[..., :5, :5],
        lambda s: ms.crop(s, (5, 5), 2, 3), lambda a: a[..., 2:7, 3:8]),
    "pad_of_crop": (
        (2, 6, 6), lambda d: d, lambda a: a,
        lambda s: ms.pad(ms.crop(s, (4, 4), 1, 1), 1), lambda a: ref_pad(a[..., 1:5, 1:5], 1)),
    "mirror": ((3, 4, 9), lambda d: d, lambda a: a, lambda s: ms.mirror(s) * 1, lambda a: a[..., ::-1]),
    "flip_axis0": ((4, 3, 5), lambda d: d, lambda a: a, lambda s: ms.flip(s, 0) + 1, lambda a: a[::-1] + 1),
    "take_reversed": (
        (6, 5), lambda d: d, lambda a: a, lambda s: ms.take(ms.from_numpy(_REV6), s), lambda a: a[::-1]),
    "take_of_expr": (
        (6, 5), lambda d: d, lambda a: a, lambda s: ms.take(_I(1, 2, 3, 4, 5, 0), s * 2),
        lambda a: (a * 2)[[1, 2, 3, 4, 5, 0]]),
    "broadcast_row": (
        (4, 6), lambda d: d, lambda a: a, lambda s: ms.broadcast(s[2], (4, 6), 1) * s,
        lambda a: a[2] * a),
    "repmat_last_row": (
        (4, 6), lambda d: d, lambda a: a, lambda s: ms.repmat(s[3], 4), lambda a: np.broadcast_to(a[3], (4, 6))),
    "reduce_keepdim_sum": (
        (4, 6, 5), lambda d: d, lambda a: a,
        lambda s: ms.broadcast_keepdim(ms.reduce_keepdim(s, 1, ms.red.sum), 1, 6),
        lambda a: np.broadcast_to(a.sum(1, keepdims=True), a.shape)),
    "minus_max_keepdim": (
        (4, 6, 5), lambda d: d, lambda a: a,
        lambda s: s - ms.broadcast_keepdim(ms.reduce_keepdim(s, 2, ms.red.maximum), 2, 5),
        lambda a: a - a.max(2, keepdims=True)),
    "reduce_with_axis0_into_row1": (
        (5, 6), lambda d: d[1], lambda a: a[1], lambda s: ms.reduce_with_axis(s, 0, ms.red.sum),
        lambda a: a.sum(0)),
    "reduce_with_axis0_expr_into_row0": (
        (5, 6), lambda d: d[0], lambda a: a[0], lambda s: ms.reduce_with_axis(s * 1, 0, ms.red.maximum),
        lambda a: a.max(0)),
    "reduce_last_axis_into_row2": (
        (6, 6), lambda d: d[2], lambda a: a[2], lambda s: ms.reduce_with_axis(s, 1, ms.red.sum),
        lambda a: a.sum(1)),
    "sum_rows_into_row3": (
        (5, 6), lambda d: d[3], lambda a: a[3], lambda s: ms.sum_rows(s * 2), lambda a: (a * 2).sum(0)),
    "sumall_except_dim1_into_a_row": (
        (4, 3, 3), lambda d: d[1][1], lambda a: a[1][1], lambda s: ms.sumall_except_dim(s, 1),
        lambda a: a.sum((0, 2))),
    "transpose_axes": (
        (2, 3, 5, 5), lambda d: d, lambda a: a, lambda s: ms.transpose_axes(s, (0, 1, 3, 2)) + s,
        lambda a: a.transpose(0, 1, 3, 2) + a),
    "swapaxis": ((3, 5, 5), lambda d: d, lambda a: a, lambda s: ms.swapaxis(s, 1, 2), lambda a: a.swapaxes(1, 2)),
    "reshape_of_T": ((4, 6), lambda d: d, lambda a: a, lambda s: ms.reshape(s.T, (4, 6)), lambda a: a.T.reshape(4, 6)),
    "T_plus_itself": ((17, 17), lambda d: d, lambda a: a, lambda s: s.T + s, lambda a: a.T + a),
    "implicit_dot_square": (
        (5, 5), lambda d: d, lambda a: a, lambda s: ms.implicit_dot(s, s) * 1,
        lambda a: a.astype(np.float64) @ a),
    "mat_choose_row_element": (
        (5, 5), lambda d: d[0], lambda a: a[0], lambda s: ms.mat_choose_row_element(s, _I(4, 3, 2, 1, 0)),
        lambda a: a[np.arange(5), [4, 3, 2, 1, 0]]),
    "take_grad": (
        (4, 4), lambda d: d, lambda a: a, lambda s: ms.take_grad(_I(1, 1, 0, 3), s, 4),
        lambda a: np.stack([a[2], a[0] + a[1], np.zeros(4, a.dtype), a[3]])),
    "upsampling_of_crop": (
        (1, 2, 8, 8), lambda d: d, lambda a: a,
        lambda s: ms.upsampling_nearest(ms.crop(s, (4, 4), 0, 0), 2),
        lambda a: np.repeat(np.repeat(a[..., :4, :4], 2, -1), 2, -2)),
    "complex_mul_of_flip": (
        (3, 8), lambda d: d, lambda a: a, lambda s: ms.complex_mul_cc(s, ms.flip(s, 0)),
        lambda a: (a.view(np.complex64) * a[::-1].view(np.complex64)).view(np.float32)),
}


def _taps_per_pixel(n, k):
    """How many k x k windows (stride 1) of an n x n image hold each pixel."""
    c = np.array([min(i, k - 1, n - 1 - i, n - k) + 1 for i in range(n)], np.float32)
    return np.outer(c, c)


@pytest.mark.parametrize("pad", [False, True], ids=["dense", "pitched"])
@pytest.mark.parametrize("wrap", sorted(WRAP))
@pytest.mark.parametrize("case", sorted(ALIAS_CASES))
def test_destination_read_under_a_stage(case, wrap, pad):
    shape, dst_of, npview, value_of, ref = ALIAS_CASES[case]
    for k, saver in enumerate(SAVERS):
        x0 = rand(shape, k)
        base = tensor_of(x0, pad)
        want = x0.copy()
        ms_save(dst_of(base), value_of(WRAP[wrap](base)), saver)
        np_save(npview(want), ref(x0.copy()).astype(np.float32), saver)
        np.testing.assert_allclose(base.numpy(), want, rtol=2e-5, atol=2e-5,
                                   err_msg=f"{case} {saver} through {wrap}")


@pytest.mark.parametrize("pad", [False, True], ids=["dense", "pitched"])
def test_shifted_aliases_through_numpy_slices(pad):
    # one tensor's memory through two numpy wrappers that overlap by one row / one column
    cases = [
        (lambda a: a[1:], lambda a: a[:-1], lambda s: s * 2),
        (lambda a: a[:-1], lambda a: a[1:], lambda s: s * 2),
        (lambda a: a[:, 1:], lambda a: a[:, :-1], lambda s: s + 0),
        (lambda a: a[:, :-1], lambda a: a[:, 1:], lambda s: s + 0),
        (lambda a: a[1:, 1:], lambda a: a[:-1, :-1], lambda s: s * 3),
        (lambda a: a[1:, :-2], lambda a: a[:-1, 2:], lambda s: ms.flip(s, 0)),
    ]
    for i, (dsl, ssl, f) in enumerate(cases):
        for saver in SAVERS:
            x0 = rand((9, 33), i)
            base = tensor_of(x0, pad)
            dst = ms.from_numpy(dsl(np.asarray(base)))
            src = ms.from_dlpack(ssl(np.asarray(base))) if i % 2 else ms.from_numpy(ssl(np.asarray(base)))
            ms_save(dst, f(src), saver)
            want = x0.copy()
            s = ssl(x0).copy()
            v = {0: s * 2, 1: s * 2, 2: s, 3: s, 4: s * 3, 5: s[::-1]}[i]
            np_save(dsl(want), v, saver)
            np.testing.assert_allclose(base.numpy(), want, rtol=1e-6, err_msg=f"case {i} {saver}")


def test_pool_of_a_shifted_foreign_view_of_the_destination():
    for pad in (False, True):
        for saver in ("=", "+="):
            x0 = rand((2, 2, 9, 33), 3)
            base = tensor_of(x0, pad)
            dst = ms.from_numpy(np.asarray(base)[..., 1:])
            src = ms.from_dlpack(np.asarray(base)[..., :-1])
            ms_save(dst, ms.pool(ms.pad(src, 1), 3, 3, 1, 1), saver)
            want = x0.copy()
            np_save(want[..., 1:], ref_pool(ref_pad(x0[..., :-1], 1), 3, 1), saver)
            np.testing.assert_array_equal(base.numpy(), want)


def test_reinterpreted_bytes_of_the_destination():
    # the destination's own bytes read as int32 through a numpy view: same elements, other
    # dtype (not an in-place read of the same values)
    x0 = rand((8, 32), 4)
    base = tensor_of(x0)
    base[:] = ms.tcast(np.float32, ms.from_numpy(np.asarray(base).view(np.int32))) * 1e-9
    np.testing.assert_allclose(base.numpy(), x0.view(np.int32).astype(np.float32) * np.float32(1e-9),
                               rtol=1e-6)
    # and the float64 destination read as two float32 halves (other itemsize)
    y0 = np.random.default_rng(5).standard_normal((4, 6))
    d = tensor_of(y0)
    halves = ms.from_numpy(np.asarray(d).view(np.float32)[:, ::2].copy())   # a copy: no alias
    d[:] = ms.tcast(np.float64, ms.from_numpy(np.asarray(d).view(np.float32).reshape(4, 12)[:, :6])) + 0
    np.testing.assert_array_equal(d.numpy(), y0.view(np.float32)[:, :6].astype(np.float64))
    del halves


@pytest.mark.parametrize("saver", ["=", "+=", "-="])
def test_products_reading_the_destination(saver):
    w0 = rand((1, 9), 6)
    cases = [
        ("dot(a, a)", (5, 5), lambda b: b, lambda a: a,
         lambda b: ms.dot(b, b), lambda a: a.astype(np.float64) @ a),
        ("dot(a.T, a) via dlpack", (5, 5), lambda b: b, lambda a: a,
         lambda b: ms.dot(ms.from_dlpack(b).T, b), lambda a: a.T.astype(np.float64) @ a),
        ("dot shifted rows", (6, 5), lambda b: b.slice(1, 6), lambda a: a[1:],
         lambda b: ms.dot(b.slice(0, 5), b.slice(1, 6)), lambda a: a[:5].astype(np.float64) @ a[1:]),
        ("gemv into a row", (5, 5), lambda b: b[0], lambda a: a[0],
         lambda b: ms.dot(b[0], b), lambda a: a[0].astype(np.float64) @ a),
        ("outer into itself", (5, 5), lambda b: b, lambda a: a,
         lambda b: ms.dot(b[0].T, b[1]), lambda a: np.outer(a[0], a[1])),
        ("batch_dot", (3, 4, 4), lambda b: b, lambda a: a,
         lambda b: ms.batch_dot(b, b, True, False), lambda a: a.transpose(0, 2, 1).astype(np.float64) @ a),
        ("batch_dot shifted", (4, 4, 4), lambda b: b.slice(1, 4), lambda a: a[1:],
         lambda b: ms.batch_dot(b.slice(0, 3), b.slice(0, 3)), lambda a: a[:3].astype(np.float64) @ a[:3]),
        ("dot rhs im2col of the destination", (1, 64), lambda b: b, lambda a: a,
         lambda b: ms.dot(ms.from_numpy(w0), ms.unpack_patch2col(
             ms.pad(ms.from_numpy(np.asarray(b).reshape(1, 1, 8, 8)), 1), 3, 3, 1)),
         lambda a: w0.astype(np.float64) @ ref_im2col(a.reshape(1, 1, 8, 8), 3, 1)),
        ("dot rhs reshape view of the destination", (1, 64), lambda b: b, lambda a: a,
         lambda b: ms.dot(ms.from_numpy(w0), ms.unpack_patch2col(
             ms.pad(ms.reshape(b, (1, 1, 8, 8)) * 1, 1), 3, 3, 1)),
         lambda a: w0.astype(np.float64) @ ref_im2col(a.reshape(1, 1, 8, 8), 3, 1)),
        ("dot rhs take of the destination", (4, 4), lambda b: b, lambda a: a,
         lambda b: ms.dot(ms.from_numpy(np.eye(4, dtype=np.float32) * 2), ms.take(_I(3, 1, 0, 2), b)),
         lambda a: 2 * a[[3, 1, 0, 2]]),
        ("dot lhs flip of the destination", (4, 4), lambda b: b, lambda a: a,
         lambda b: ms.dot(ms.flip(b, 0), ms.from_numpy(np.eye(4, dtype=np.float32))), lambda a: a[::-1]),
    ]
    for name, shape, dst_of, npview, value_of, ref in cases:
        for pad in (False, True):
            x0 = rand(shape, 7)
            base = tensor_of(x0, pad and name not in ("dot rhs reshape view of the destination",))
            want = x0.copy()
            ms_save(dst_of(base), value_of(base), saver)
            np_save(npview(want), ref(x0.copy()), saver)
            np.testing.assert_allclose(base.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=name)


def test_free_functions_reading_the_destination():
    rng = np.random.default_rng(8)

    def softmax(a):
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    x0 = rng.standard_normal((6, 7)).astype(np.float32)
    t = ms.from_numpy(x0.copy())
    ms.softmax(t.slice(1, 6), t.slice(0, 5))
    want = x0.copy()
    want[1:] = softmax(x0[:5])
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)

    x0 = rng.standard_normal((6, 4)).astype(np.float32)
    t = ms.from_numpy(x0.copy())
    ms.nn.add_take_grad(t.slice(0, 3), _I(0, 2, 2), t.slice(2, 5))
    want = x0.copy()
    for i, k in enumerate([0, 2, 2]):
        want[k] += x0[2 + i]
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)

    t = ms.from_numpy(x0.copy())
    ms.nn.index_fill(t.slice(0, 4), _I(3, 2, 1), t.slice(1, 4))
    want = x0.copy()
    for i, k in enumerate([3, 2, 1]):
        want[k] = x0[1 + i]
    np.testing.assert_array_equal(t.numpy(), want)

    t = ms.from_numpy(x0.copy())
    ms.copy(t.slice(1, 6), t.slice(0, 5))
    want = x0.copy()
    want[1:] = x0[:5]
    np.testing.assert_array_equal(t.numpy(), want)

    y0 = rng.standard_normal((6, 8)).astype(np.float32)
    t = ms.from_numpy(y0.copy())
    ms.copy(ms.from_numpy(np.asarray(t)[:, 1:5]), ms.from_dlpack(np.asarray(t)[:, 0:4]))
    want = y0.copy()
    want[:, 1:5] = y0[:, 0:4]
    np.testing.assert_array_equal(t.numpy(), want)

    k0 = rng.standard_normal(11).astype(np.float32)
    k = ms.from_numpy(k0.copy())
    ms.nn.sort_by_key(k, k)                       # keys and values are one tensor
    np.testing.assert_array_equal(k.numpy(), np.sort(k0))


@pytest.mark.parametrize("fn", ["softmax_grad", "smooth_softmax_grad", "add_take_grad",
                                "index_fill", "add_take_grad_large_batch"])
def test_labels_and_indices_that_are_the_destinations_own_row(fn):
    # the label / index vector is a numpy view of dst's first row: it must be read as it was
    # before the call (docs/reduce_nn.md: an overlapping source is read as before)
    d0 = np.array([[1, 2, 3, 0, 9], [5] * 5, [6] * 5, [7] * 5], np.float32)
    s0 = np.arange(20, dtype=np.float32).reshape(4, 5) + 100
    rows, labels = np.arange(4), [1, 2, 3, 0]
    t = ms.from_numpy(d0.copy())
    lab = ms.from_numpy(np.asarray(t)[0, :4])
    src = ms.from_numpy(s0)
    want = d0.copy()
    if fn == "softmax_grad":
        ms.nn.softmax_grad(t, src, lab)
        want = s0.copy()
        want[rows, labels] -= 1
    elif fn == "smooth_softmax_grad":
        ms.nn.smooth_softmax_grad(t, src, lab, 0.2)
        want = s0 - np.float32(0.2 / 4)
        want[rows, labels] = s0[rows, labels] - 1 + np.float32(0.2)
    elif fn == "add_take_grad":
        ms.nn.add_take_grad(t, lab, src)
        for i, k in enumerate(labels):
            want[k] += s0[i]
    elif fn == "index_fill":
        ms.nn.index_fill(t, lab, src)
        for i, k in enumerate(labels):
            want[k] = s0[i]
    else:
        ms.nn.add_take_grad_large_batch(t, lab, ms.from_numpy(np.arange(4, dtype=np.float32)), src)
        for i, k in enumerate(labels):
            want[k] += s0[i]
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("view", ["flip", "slice", "concat"])
def test_view_targets_over_foreign_wrappers_of_their_own_memory(view):
    for saver in SAVERS:
        x0 = rand((6, 10), 9)
        base = tensor_of(x0, True)
        want = x0.copy()
        src = ms.from_dlpack(base)
        if view == "flip":
            ms_save(ms.flip(ms.from_numpy(np.asarray(base)), 0), src * 1, saver)
            np_save(want[::-1], x0, saver)
        elif view == "slice":
            ms_save(ms.slice_axis(ms.from_numpy(np.asarray(base)), 1, 1, 6), ms.slice_axis(src, 1, 0, 5), saver)
            np_save(want[:, 1:6], x0[:, 0:5], saver)
        else:
            a = ms.from_numpy(np.asarray(base)[:, :4])
            b = ms.from_numpy(np.asarray(base)[:, 4:])
            ms_save(ms.concat(a, b, 1), ms.mirror(src), saver)
            np_save(want, x0[:, ::-1], saver)
        np.testing.assert_allclose(base.numpy(), want, rtol=1e-6, err_msg=saver)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_banded_statements_reading_the_destination(nthreads, threads):
    # above the banding threshold (262,144 output elements): stages run band by band
    threads(nthreads)
    cases = [
        ((2, 4, 200, 190), lambda d: d, lambda a: a,
         lambda s: ms.pool(ms.pad(ms.F(ms.op.relu, s), 1), 3, 3, 1, 1),
         lambda a: ref_pool(ref_pad(np.maximum(a, 0), 1), 3, 1)),
        ((2, 4, 201, 190), lambda d: ms.slice_axis(d, 2, 1, 201), lambda a: a[:, :, 1:],
         lambda s: ms.pool(ms.pad(ms.slice_axis(s, 2, 0, 200), 1), 3, 3, 1, 1),
         lambda a: ref_pool(ref_pad(a[:, :, :200], 1), 3, 1)),
        ((2, 4, 200, 190), lambda d: d, lambda a: a,
         lambda s: ms.mirror(ms.pool(ms.pad(s, 1), 3, 3, 1, 1)),
         lambda a: ref_pool(ref_pad(a, 1), 3, 1)[..., ::-1]),
        ((600, 513), lambda d: d, lambda a: a,
         lambda s: ms.take(ms.from_numpy(np.arange(600)[::-1].astype(np.int32)), s * 2),
         lambda a: (a * 2)[::-1]),
        ((2, 300, 1000), lambda d: d, lambda a: a,
         lambda s: ms.concat(ms.slice_axis(s, 1, 150, 300) * 1, ms.slice_axis(s, 1, 0, 150), 1),
         lambda a: np.concatenate([a[:, 150:], a[:, :150]], 1)),
    ]
    for i, (shape, dst_of, npview, value_of, ref) in enumerate(cases):
        saver = ("=", "+=", "-=", "*=", "=")[i]
        x0 = rand(shape, 10 + i)
        base = tensor_of(x0, i % 2 == 1)
        want = x0.copy()
        ms_save(dst_of(base), value_of(ms.from_numpy(np.asarray(base)) if i == 2 else base), saver)
        np_save(npview(want), ref(x0.copy()), saver)
        np.testing.assert_allclose(base.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=str(i))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.float16])
@pytest.mark.parametrize("saver", SAVERS)
def test_aliased_statement_gives_the_bits_of_the_unaliased_one(dtype, saver):
    # the temporary of an aliased statement has the compute type: integers must still wrap,
    # float16 still round per operator, exactly as the same statement over a copy does
    rng = np.random.default_rng(11)
    if np.dtype(dtype).kind == "f":
        a0 = (rng.standard_normal((6, 6)) * 3).astype(dtype)
        c = 100
    else:
        a0 = rng.integers(1, 120, (6, 6)).astype(dtype)
        c = 2 ** 31 - 50 if dtype == np.int32 else 100
    for make in (lambda s: (s.T + c) * 3,
                 lambda s: ms.pool(ms.pad(s * 3, 1), 3, 3, 1, 1, ms.red.sum) + c,
                 lambda s: ms.flip(s, 0) * c - s):
        shaped = a0.reshape(1, 1, 6, 6) if make.__code__.co_names.count("pool") else a0
        t1 = ms.from_numpy(shaped.copy())
        t2 = ms.from_numpy(shaped.copy())
        src = ms.from_numpy(shaped.copy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ms_save(t1, make(t1), saver)
            ms_save(t2, make(src), saver)
        np.testing.assert_array_equal(t1.numpy(), t2.numpy())


# ============================================================================================
# 2. Threads racing free / resize / release; statements that fail store nothing
# ============================================================================================

_RACE_PRELUDE = """
import faulthandler
rng = np.random.default_rng(0)
x0 = rng.standard_normal((512, 512)).astype(np.float32)
unexpected = []

def race(fa, fb, tag, ok=(ms.MShadowError, BufferError)):
    res = [None, None]
    bar = threading.Barrier(2)
    def call(k, fn):
        try:
            bar.wait()
            fn()
        except ok as ex:
            res[k] = ex
        except BaseException as ex:
            unexpected.append(f"{tag} {k}: {ex!r}")
            res[k] = ex
    ts = [threading.Thread(target=call, args=(0, fa)), threading.Thread(target=call, args=(1, fb))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), f"{tag}: hang"
    return res
"""


def test_free_of_the_destination_or_its_sources_while_assignments_run():
    out = run_child(prelude=_RACE_PRELUDE, code="""
    for r in range(60):
        d = ms.new_tensor((512, 512), init=-7.0)
        race(lambda: d.__setitem__(slice(None), ms.F(ms.op.exp, ms.from_numpy(x0)) * 2),
             lambda: ms.free_space(d), "free dst")
        d = ms.new_tensor((512, 512)); d[:] = x0
        race(lambda: d.__setitem__(slice(None), d.T * 2), lambda: ms.free_space(d), "free aliased dst")

        s = ms.new_tensor((512, 512)); s[:] = x0
        d = ms.new_tensor((512, 512), init=-7.0)
        err, _ = race(lambda: d.__setitem__(slice(None), s.T * 2 + s), lambda: ms.free_space(s), "free src")
        got = d.numpy()
        if err is None:
            assert np.allclose(got, x0.T * 2 + x0), f"round {r}: wrong values"
        else:
            assert (got == -7).all(), f"round {r}: {err!r} after {(got != -7).sum()} stores"

        a = ms.new_tensor((256, 256)); a[:] = x0[:256, :256]
        d = ms.new_tensor((256, 256), init=-7.0)
        err, _ = race(lambda: d.__setitem__(slice(None), ms.dot(a, a)), lambda: ms.free_space(a), "free dot operand")
        got = d.numpy()
        if err is None:
            ref = x0[:256, :256].astype(np.float64) @ x0[:256, :256]
            assert np.allclose(got, ref, rtol=1e-3, atol=1e-3), f"round {r}: dot wrong"
        else:
            assert (got == -7).all(), f"round {r}: dot half written"

        w = ms.new_tensor((64, 9)); w[:] = x0[:64, :9]
        img = ms.new_tensor((4, 1, 64, 64)); img[:] = x0[:32].reshape(4, 1, 64, 64)
        d = ms.new_tensor((64, 4 * 64 * 64), init=-7.0)
        err, _ = race(lambda: d.__setitem__(slice(None), ms.dot(w, ms.unpack_patch2col(ms.pad(img, 1), 3, 3, 1))),
                      lambda: ms.free_space(img), "free panel source")
        if err is not None:
            assert (d.numpy() == -7).all(), f"round {r}: panels half written"

        s = ms.new_tensor((512, 512)); s[:] = x0
        v = ms.new_tensor((512,), init=-7.0)
        err, _ = race(lambda: v.__setitem__(slice(None), ms.sum_rows(s * 2)), lambda: ms.free_space(s), "free reduce src")
        if err is None:
            assert np.allclose(v.numpy(), (x0 * 2).sum(0), rtol=1e-3, atol=1e-3)
        else:
            assert (v.numpy() == -7).all()

        s = ms.new_tensor((1024, 512), init=1.0); d = ms.new_tensor((1024, 512), init=-7.0)
        err, _ = race(lambda: ms.copy(d, s), lambda: ms.free_space(s), "free copy src")
        assert (d.numpy() == (1 if err is None else -7)).all(), f"round {r}: copy half written"

        d = ms.new_tensor((512, 512), init=-7.0)
        race(lambda: ms.flip(d, 0).__setitem__(slice(None), ms.from_numpy(x0) * 2),
             lambda: ms.free_space(d), "free view target")
        a, b = ms.new_tensor((256, 512), init=-7.0), ms.new_tensor((256, 512), init=-7.0)
        err, _ = race(lambda: ms.concat(a, b, 0).__setitem__(slice(None), ms.from_numpy(x0) * 2),
                      lambda: ms.free_space(b), "free concat half")
        if err is not None:
            assert (a.numpy() == -7).all(), f"round {r}: concat's other half written"

        s = ms.new_tensor((512, 512))
        e1, e2 = race(lambda: ms.free_space(s), lambda: ms.free_space(s), "double free")
        assert (e1 is None) != (e2 is None) and isinstance(e1 or e2, ms.FreedTensorError), (e1, e2)
        s = ms.new_tensor((512, 512), init=1.0)
        got = []
        e1, _ = race(lambda: got.append(float(np.asarray(s).sum())), lambda: ms.free_space(s), "numpy vs free")
        if e1 is None:
            assert got == [512 * 512]
    assert not unexpected, unexpected[:5]
    print("ok")
    """)
    assert out.strip().endswith("ok")


def test_resize_and_release_while_assignments_run():
    out = run_child(prelude=_RACE_PRELUDE, code="""
    for r in range(60):
        c = ms.TensorContainer((512, 512), pad=False); c[:] = x0
        err, _ = race(lambda: c.__setitem__(slice(None), c.T * 2), lambda: c.resize((256, 512)), "resize aliased dst")
        if err is None and tuple(c.shape) == (512, 512):
            assert np.allclose(c.numpy(), x0.T * 2)

        c = ms.TensorContainer((512,), pad=False, init=-7.0)
        err, _ = race(lambda: c.__setitem__(slice(None), ms.sum_rows(ms.from_numpy(x0))),
                      lambda: c.resize((1024,)), "resize reduce dst")
        if err is None and tuple(c.shape) == (512,):
            assert np.allclose(c.numpy(), x0.sum(0), rtol=1e-3, atol=1e-3)

        s = ms.TensorContainer((512, 512)); s[:] = x0
        d = ms.new_tensor((512, 512), init=-7.0)
        err, _ = race(lambda: ms.softmax(d, s), s.release, "release softmax src")
        if err is not None:
            assert (d.numpy() == -7).all(), "softmax half written"

        s = ms.TensorContainer((256, 512)); s[:] = x0[:256]
        d = ms.new_tensor((256, 512), init=-7.0)
        err, _ = race(lambda: d.__setitem__(slice(None), ms.take(ms.from_numpy(np.arange(256)[::-1].copy()), s) * 2),
                      lambda: s.resize((512, 1024)), "resize take src")
        if err is None:
            assert np.array_equal(d.numpy(), x0[:256][::-1] * 2), f"round {r}: take wrong"
        else:
            assert (d.numpy() == -7).all()

        c = ms.TensorContainer((64, 64))
        race(lambda: c.resize((128, 128), init=1.0), lambda: c.resize((32, 200), init=2.0), "resize vs resize")
        a = c.numpy()
        assert a.shape in ((128, 128), (32, 200)) and (a == a.flat[0]).all(), a.shape
        del a

        c = ms.TensorContainer((256, 256), init=3.0)
        e1, e2 = race(c.release, c.release, "release vs release")
        assert e1 is None and e2 is None and c.shape[0] == 0
    assert not unexpected, unexpected[:5]
    print("ok")
    """)
    assert out.strip().endswith("ok")


def test_plan_cache_simd_level_and_thread_count_changed_under_running_statements():
    out = run_child("""
    import random
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((300, 257)).astype(np.float32)
    y0 = rng.standard_normal((300, 257)).astype(np.float32)
    x, y = ms.from_numpy(x0), ms.from_numpy(y0)
    levels = ms.simd_info()["compiled"]
    detected = ms.simd_info()["detected"]
    stop = threading.Event()
    bad = []

    def disturb():
        r = random.Random(1)
        while not stop.is_set():
            k = r.randrange(3)
            if k == 0:
                ms.clear_plan_cache()
                ms.set_plan_cache_size(r.choice([1, 2, 2048]))
            elif k == 1:
                lv = r.choice(levels)
                if levels.index(lv) <= levels.index(detected):
                    ms.set_simd_level(lv)
            else:
                ms.set_num_threads(r.choice([1, 2, 3]))

    def work(seed):
        r = random.Random(seed)
        o = ms.new_tensor((300, 257))
        try:
            for i in range(150):
                c = float(r.randrange(1, 5))
                k = r.randrange(4)
                if k == 0:
                    o[:] = x * c + y
                    want = x0 * np.float32(c) + y0
                elif k == 1:
                    o[:] = ms.flip(x, 0) / c
                    want = x0[::-1] / np.float32(c)
                elif k == 2:
                    o[:] = ms.crop(ms.pad(x * c, 1), (300, 257), 1, 1)
                    want = x0 * np.float32(c)
                else:
                    o[:] = ms.take(ms.from_numpy(np.arange(300)[::-1].copy()), y) + c
                    want = y0[::-1] + np.float32(c)
                if not np.allclose(o.numpy(), want, rtol=1e-6, atol=1e-6):
                    bad.append((k, i))
        except BaseException as ex:
            bad.append(repr(ex))

    d = threading.Thread(target=disturb)
    d.start()
    ws = [threading.Thread(target=work, args=(s,)) for s in range(2)]
    for w in ws:
        w.start()
    for w in ws:
        w.join(120)
    stop.set()
    d.join()
    assert not bad, bad[:5]
    print("ok")
    """)
    assert out.strip().endswith("ok")


def _untouched(dsts, fn, exc=IndexError, match=None):
    snaps = [np.array(d.numpy(), copy=True) for d in dsts]
    with pytest.raises(exc, match=match):
        fn()
    for d, s in zip(dsts, snaps):
        np.testing.assert_array_equal(d.numpy(), s)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_a_bad_index_found_late_stores_nothing(nthreads, threads):
    threads(nthreads)
    N = 4000
    rng = np.random.default_rng(12)
    src = ms.from_numpy(rng.standard_normal((N, 300)).astype(np.float32))
    idx = np.arange(N, dtype=np.float32)[::-1].copy()
    idx[-1] = N                                  # only the last row's index is out of range
    it = ms.from_numpy(idx)
    d = ms.new_tensor((N, 300), init=-7.0)
    msg = r"index values must lie in \[0, 4000\)"
    _untouched([d], lambda: d.__setitem__(slice(None), ms.take(it, src)), match=msg)
    _untouched([d], lambda: d.__setitem__(slice(None), ms.take(it * 1, src * 2)), match=msg)
    _untouched([d], lambda: d.__iadd__(ms.take(it, src) + src), match=msg)
    _untouched([d], lambda: d.__setitem__(slice(None), ms.crop(ms.pad(ms.take(it, src), 1), (N, 300), 1, 1)))
    _untouched([d], lambda: d.__setitem__(slice(None), ms.take(it, d)))           # aliased too
    _untouched([d], lambda: ms.flip(d, 0).__setitem__(slice(None), ms.take(it, src)))
    _untouched([d], lambda: ms.mirror(d).__setitem__(slice(None), ms.take(it, src)))
    d4 = ms.new_tensor((1, 1, N // 2, 150), init=-7.0)
    _untouched([d4], lambda: d4.__setitem__(slice(None), ms.pool(
        ms.reshape(ms.take(it, src), (1, 1, N, 300)), 2, 2, 2, 2)))
    v = ms.new_tensor((300,), init=-7.0)
    _untouched([v], lambda: v.__setitem__(slice(None), ms.sum_rows(ms.take(it, src))))
    _untouched([v], lambda: v.__setitem__(slice(None), ms.reduce_with_axis(ms.take(it, src), 0, ms.red.maximum)))
    _untouched([d], lambda: d.__setitem__(slice(None), ms.dot(ms.take(it, src),
                                                              ms.from_numpy(np.eye(300, dtype=np.float32)))))
    a, b = ms.new_tensor((N // 2, 300), init=-7.0), ms.new_tensor((N // 2, 300), init=-7.0)
    _untouched([a, b], lambda: ms.concat(a, b, 0).__setitem__(slice(None), ms.take(it, src)))
    ci = np.zeros(N, np.float32)
    ci[-1] = 300
    c1 = ms.new_tensor((N,), init=-7.0)
    _untouched([c1], lambda: c1.__setitem__(slice(None), ms.mat_choose_row_element(src, ms.from_numpy(ci))))
    _untouched([d], lambda: d.__setitem__(slice(None), ms.mat_fill_row_element(
        src, ms.from_numpy(np.ones(N, np.float32)), ms.from_numpy(ci))))
    _untouched([d], lambda: d.__setitem__(slice(None), ms.one_hot_encode(ms.from_numpy(ci), 300)))
    _untouched([d], lambda: d.__iadd__(ms.take_grad(it, src * 2, N)))
    nan_idx = np.zeros(N, np.float32)
    nan_idx[-1] = np.nan
    _untouched([d], lambda: d.__setitem__(slice(None), ms.take(ms.from_numpy(nan_idx), src)),
               match="finite")
    _untouched([d], lambda: ms.nn.softmax_grad(d, src, ms.from_numpy(np.full(N, 300, np.float32))),
               exc=(IndexError, ValueError))


def test_a_shape_error_found_late_stores_nothing():
    x = ms.from_numpy(rand((4, 6), 13))
    d = ms.new_tensor((4, 6), init=-7.0)
    box = ms.TensorContainer((4, 6), init=1.0)
    e = box * 2 + x                  # built over the container's old shape
    box.resize((6, 4))
    _untouched([d], lambda: d.__setitem__(slice(None), e), exc=ms.ShapeError)
    _untouched([d], lambda: d.__setitem__(slice(None), ms.implicit_dot(x, ms.new_tensor((5, 6)))),
               exc=ms.ShapeError)
    _untouched([d], lambda: d.__setitem__(slice(None), ms.dot(x, ms.new_tensor((5, 6)))),
               exc=ms.ShapeError, match="dot-gemm")
    v = ms.new_tensor((5,), init=-7.0)
    _untouched([v], lambda: v.__setitem__(slice(None), ms.sum_rows(x)), exc=ms.ShapeError)
    c = ms.TensorContainer((4, 6), init=-7.0)
    _untouched([c], lambda: c.__setitem__(slice(None), ms.new_tensor((6, 4)) * 1.0),
               exc=ms.ShapeError, match="not consistent with target")
    assert tuple(c.shape) == (4, 6)


# ============================================================================================
# 3. Shapes, layouts, dtypes and payloads
# ============================================================================================

ODD = [0, 1, 15, 16, 17, 31, 33, 63, 65, 255, 257, 511, 513]
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64]


def _payload(shape, dtype, rng):
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal(shape) * 3
        if a.size > 4:
            a.flat[0], a.flat[1], a.flat[2], a.flat[-1] = np.nan, np.inf, -0.0, -np.inf
        return a.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def _placed(a, layout):
    """``a`` in a contiguous, pitched or offset (element 1 of a pitched 3-D) tensor."""
    if layout == "offset":
        t = ms.new_tensor((2,) + a.shape, dtype=a.dtype, pad=True)[1]
    else:
        t = ms.new_tensor(a.shape, dtype=a.dtype, pad=layout == "pitched")
    t[:] = a
    return t


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_elementwise_chain_bit_exact_around_simd_widths(dtype):
    # numpy is the oracle bit for bit: IEEE results (float16 rounds after every operator,
    # docs/accuracy.md), NaN / inf / -0.0 payloads, integer wrap-around
    rng = np.random.default_rng(14)
    for n in ODD:
        for shape in [(n,), (3, n), (n, 3) if n < 100 else (2, 2, n)]:
            for layout in ("contiguous", "pitched", "offset"):
                a, b = _payload(shape, dtype, rng), _payload(shape, dtype, rng)
                ta, tb = _placed(a, layout), _placed(b, layout)
                o = _placed(np.zeros(shape, dtype), "pitched" if layout == "contiguous" else "contiguous")
                with np.errstate(all="ignore"):
                    o[:] = ta * tb + ta - tb
                    want = a * b + a - b
                np.testing.assert_array_equal(o.numpy(), want, err_msg=f"{shape} {layout}")
                if np.dtype(dtype).kind == "f" and a.size > 4:
                    o[:] = ms.mirror(ta)
                    got = o.numpy()[..., ::-1]
                    assert np.isnan(got.flat[0]) and got.flat[1] == np.inf and got.flat[-1] == -np.inf
                    assert got.flat[2] == 0 and np.signbit(got.flat[2]), "-0.0 lost its sign"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8, np.uint8],
                         ids=lambda d: np.dtype(d).name)
def test_reductions_around_simd_widths(dtype):
    rng = np.random.default_rng(15)
    for n in [1, 15, 16, 17, 31, 33, 63, 65, 255, 257, 513]:
        for m in (1, 3, 17):
            for pad in (False, True):
                if np.dtype(dtype).kind == "f":
                    a = (rng.standard_normal((m, n)) * 4).astype(dtype)
                else:
                    info = np.iinfo(dtype)
                    a = rng.integers(info.min, info.max, (m, n), endpoint=True).astype(dtype)
                t = _placed(a, "pitched" if pad else "contiguous")
                for ax in (0, 1):
                    for src in (t, t * 1):
                        o = ms.new_tensor(a.shape[:ax] + a.shape[ax + 1:], dtype=dtype)
                        o[:] = ms.reduce_with_axis(src, ax, ms.red.maximum)
                        np.testing.assert_array_equal(o.numpy(), a.max(ax))
                        o[:] = ms.reduce_with_axis(src, ax, ms.red.minimum)
                        np.testing.assert_array_equal(o.numpy(), a.min(ax))
                        o[:] = ms.reduce_with_axis(src, ax, ms.red.sum)
                        if np.dtype(dtype).kind == "f":
                            tol = 5e-3 if dtype == np.float16 else 1e-5
                            np.testing.assert_allclose(o.numpy().astype(np.float64),
                                                       a.astype(np.float64).sum(ax),
                                                       rtol=tol, atol=tol * 20)
                        else:                               # wraps as the integer type does
                            np.testing.assert_array_equal(o.numpy(), a.sum(ax, dtype=dtype))
                    if np.dtype(dtype).kind == "f":
                        a2 = a.copy()
                        a2.flat[a.size // 2] = np.nan
                        t2 = _placed(a2, "pitched" if pad else "contiguous")
                        o = ms.new_tensor(a.shape[:ax] + a.shape[ax + 1:], dtype=dtype)
                        o[:] = ms.reduce_with_axis(t2, ax, ms.red.maximum)
                        np.testing.assert_array_equal(o.numpy(), a2.max(ax))      # NaN propagates
                        o[:] = ms.reduce_with_axis(t2, ax, ms.red.maximum, mask=True)
                        np.testing.assert_array_equal(o.numpy(), np.argmax(a2, ax).astype(dtype))


def test_zero_size_and_one_element_statements():
    for shape in [(0,), (0, 5), (5, 0), (2, 0, 3), (1,), (1, 1), (1, 1, 1, 1)]:
        for pad in (False, True):
            a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
            t = _placed(a, "pitched" if pad else "contiguous")
            o = ms.new_tensor(shape, init=5.0, pad=not pad)
            o += ms.F(ms.op.exp, t * 0) + t
            np.testing.assert_array_equal(o.numpy(), 5 + 1 + a)
            o[:] = ms.flip(t, 0) * 2
            np.testing.assert_array_equal(o.numpy(), np.flip(a, 0) * 2)
    v = ms.new_tensor((5,), init=3.0)
    v[:] = ms.reduce_with_axis(ms.new_tensor((0, 5)), 0, ms.red.sum)
    np.testing.assert_array_equal(v.numpy(), np.zeros(5, np.float32))
    assert float(ms.sum(ms.new_tensor((0, 5)))) == 0.0
    c = ms.new_tensor((3, 4), init=5.0)
    c[:] = ms.dot(ms.new_tensor((3, 0)), ms.new_tensor((0, 4)))          # k = 0: zeros
    np.testing.assert_array_equal(c.numpy(), np.zeros((3, 4), np.float32))
    c = ms.new_tensor((3, 4), init=5.0)
    c += ms.dot(ms.new_tensor((3, 0)), ms.new_tensor((0, 4)))
    np.testing.assert_array_equal(c.numpy(), np.full((3, 4), 5, np.float32))
    with pytest.raises(ms.ShapeError, match="can not reduce over empty tensor"):
        ms.nn.map_reduce_keep_lowest(ms.new_tensor((5,)), ms.new_tensor((0, 5)))


def test_integer_overflow_and_division_semantics():
    i32 = ms.new_tensor((3,), dtype=np.int32)
    m = ms.new_tensor((3,), -2 ** 31, dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for e in (m / -1, m * -1, -m, abs(m)):              # C's wrap, no trap
            i32[:] = e
            np.testing.assert_array_equal(i32.numpy(), [-2 ** 31] * 3)
        i32[:] = ms.new_tensor((3,), 5, dtype=np.int32) / 0
        np.testing.assert_array_equal(i32.numpy(), [0, 0, 0])
    i32[:] = ms.from_numpy(np.array([-7, 7, -1], np.int32)) / 2        # truncation
    np.testing.assert_array_equal(i32.numpy(), [-3, 3, 0])
    i8 = ms.new_tensor((3,), 100, dtype=np.int8)
    i8 += ms.new_tensor((3,), 100, dtype=np.int8)
    np.testing.assert_array_equal(i8.numpy(), [-56] * 3)
    u8 = ms.new_tensor((3,), 0, dtype=np.uint8)
    u8[:] = u8 - 1
    np.testing.assert_array_equal(u8.numpy(), [255] * 3)
    i64 = ms.new_tensor((3,), 1, dtype=np.int64)
    i64[:] = i64 + (2 ** 63 - 1)
    np.testing.assert_array_equal(i64.numpy(), [-2 ** 63] * 3)
    o = ms.new_tensor((4,), dtype=np.int32)
    o[:] = ms.tcast(np.int32, ms.from_numpy(np.array([1.7, -1.7, 2.5, -2.5], np.float32)))
    np.testing.assert_array_equal(o.numpy(), [1, -1, 2, -2])            # toward zero


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")   # (numpy's too)
def test_huge_and_tiny_scalars():
    f32 = ms.new_tensor((2,))
    for v, want in [(1e39, np.inf), (-1e39, -np.inf), (1e-50, 0.0), (2 ** 200, np.inf)]:
        f32[:] = v
        np.testing.assert_array_equal(f32.numpy(), np.float32(v) if v != 2 ** 200 else want)
    f16 = ms.new_tensor((2,), dtype=np.float16)
    for v in (65504.0, 65520.0, 1e5, 1e-8, 6e-8):
        f16[:] = v
        np.testing.assert_array_equal(f16.numpy(), np.float16(v))
    f16[:] = ms.new_tensor((2,), 1.0, dtype=np.float16) * 70000
    assert (f16.numpy() == np.inf).all()
    i8 = ms.new_tensor((2,), 3, dtype=np.int8)
    for v in (128, -129, 2 ** 70):
        with pytest.raises(OverflowError, match="out of bounds for int8"):
            i8[:] = v
        np.testing.assert_array_equal(i8.numpy(), [3, 3])
    for v in (1.5, float("nan"), float("inf")):
        with pytest.raises(ms.DTypeError, match="not representable in int8"):
            i8[:] = v
        np.testing.assert_array_equal(i8.numpy(), [3, 3])
    with pytest.raises(OverflowError, match="out of bounds for int8"):
        i8[:] = i8 + 200
    i64 = ms.new_tensor((2,), 3, dtype=np.int64)
    with pytest.raises(OverflowError, match="out of bounds for int64"):
        i64[:] = 2 ** 63
    i64[:] = -2 ** 63
    np.testing.assert_array_equal(i64.numpy(), [-2 ** 63] * 2)


def test_pitched_tensors_and_strided_numpy_views_agree_with_numpy():
    rng = np.random.default_rng(16)
    for cols in (1, 3, 17, 65):
        big = rng.standard_normal((7, 3 * cols + 5)).astype(np.float32)
        rows = big[1:6, 2:2 + cols]                 # sliced rows: a pitch of its own
        steps = big[::2, :cols]                     # a row step
        t_rows, t_steps = ms.from_numpy(rows), ms.from_numpy(steps)
        assert t_rows.stride == big.shape[1]
        o = ms.new_tensor((5, cols), pad=True)
        o[:] = t_rows * 2 + ms.flip(t_rows, 0)
        np.testing.assert_array_equal(o.numpy(), rows * 2 + rows[::-1])
        o2 = ms.new_tensor(steps.shape, pad=True)
        o2[:] = ms.mirror(t_steps) - t_steps
        np.testing.assert_array_equal(o2.numpy(), steps[:, ::-1] - steps)
        t_rows[:] = ms.flip(t_rows, 0)              # writes through into big
        np.testing.assert_array_equal(big[1:6, 2:2 + cols], rows)
    p = ms.new_tensor((3, 5), pad=True)
    assert p.stride * 4 % 64 == 0 and not p.check_contiguous()


# ============================================================================================
# 4. Bad input: typed errors that say what was wrong, and nothing written
# ============================================================================================

def _readonly(shape, dtype=np.float32, val=5):
    a = np.full(shape, val, dtype)
    a.flags.writeable = False
    return a


def _readonly_cases():
    A = np.random.default_rng(17).standard_normal((4, 4)).astype(np.float32)
    a, v, b3, img = _readonly((4, 4)), _readonly((4,)), _readonly((2, 4, 4)), _readonly((1, 1, 6, 6))
    k, vals = _readonly((4,)), _readonly((4,))
    t, tv = ms.from_numpy(a), ms.from_numpy(v)
    A2 = np.stack([A, A])
    return [
        ("=", [a], lambda: t.__setitem__(slice(None), 1.0)),
        ("+=", [a], lambda: t.__iadd__(ms.from_numpy(A))),
        ("dot", [a], lambda: t.__setitem__(slice(None), ms.dot(ms.from_numpy(A), ms.from_numpy(A)))),
        ("dot of expression", [a], lambda: t.__setitem__(slice(None), ms.dot(ms.from_numpy(A), ms.from_numpy(A) * 2))),
        ("dot +=", [a], lambda: t.__iadd__(ms.dot(ms.from_numpy(A), ms.from_numpy(A)))),
        ("implicit_dot", [a], lambda: t.__setitem__(slice(None), ms.implicit_dot(ms.from_numpy(A), ms.from_numpy(A)))),
        ("sum_rows", [v], lambda: tv.__setitem__(slice(None), ms.sum_rows(ms.from_numpy(A)))),
        ("sum_rows of expression", [v], lambda: tv.__setitem__(slice(None), ms.sum_rows(ms.from_numpy(A) * 2))),
        ("reduce_with_axis", [v], lambda: tv.__setitem__(slice(None), ms.reduce_with_axis(ms.from_numpy(A), 1, ms.red.maximum))),
        ("arg reduce", [v], lambda: tv.__setitem__(slice(None), ms.reduce_with_axis(ms.from_numpy(A), 1, ms.red.maximum, mask=True))),
        ("sumall_except_dim", [v], lambda: tv.__setitem__(slice(None), ms.sumall_except_dim(ms.from_numpy(A), 0))),
        ("map_reduce_keep_lowest", [v], lambda: ms.nn.map_reduce_keep_lowest(tv, ms.from_numpy(A))),
        ("softmax", [a], lambda: ms.softmax(t, ms.from_numpy(A))),
        ("softmax_grad", [a], lambda: ms.nn.softmax_grad(t, ms.from_numpy(A), ms.from_numpy(np.zeros(4, np.float32)))),
        ("add_take_grad", [a], lambda: ms.nn.add_take_grad(t, _I(0, 0, 0, 0), ms.from_numpy(A))),
        ("index_fill", [a], lambda: ms.nn.index_fill(t, _I(0, 1, 2, 3), ms.from_numpy(A))),
        ("sort_by_key", [k, vals], lambda: ms.nn.sort_by_key(ms.from_numpy(k), ms.from_numpy(vals))),
        ("copy", [a], lambda: ms.copy(t, ms.from_numpy(A))),
        ("flip target", [a], lambda: ms.flip(t, 0).__setitem__(slice(None), ms.from_numpy(A))),
        ("flip target of dot", [a], lambda: ms.flip(t, 0).__setitem__(slice(None), ms.dot(ms.from_numpy(A), ms.from_numpy(A)))),
        ("flip target of sum_rows", [v], lambda: ms.flip(tv, 0).__setitem__(slice(None), ms.sum_rows(ms.from_numpy(A)))),
        ("Random.sample_uniform", [a], lambda: ms.Random(seed=1).sample_uniform(t)),
        ("Random.sample_gaussian", [a], lambda: ms.Random(seed=1).sample_gaussian(t)),
        ("batch_dot", [b3], lambda: ms.from_numpy(b3).__setitem__(slice(None), ms.batch_dot(ms.from_numpy(A2), ms.from_numpy(A2)))),
        ("conv2d", [img], lambda: ms.nn.conv2d(ms.from_numpy(img), ms.from_numpy(np.ones((1, 1, 6, 6), np.float32)),
                                               ms.from_numpy(np.ones((1, 1, 1, 1), np.float32)))),
        ("np.asarray of a read-only tensor", [a], lambda: ms.from_numpy(np.asarray(t)).__setitem__(slice(None), 1.0)),
    ] + ([] if OLD_NUMPY else [   # (numpy < 2.1 cannot export a read-only array by DLPack)
        ("from_dlpack of a read-only array", [a], lambda: ms.from_dlpack(a).__setitem__(slice(None), 1.0)),
    ])


@pytest.mark.parametrize("k", range(len(_readonly_cases())), ids=[c[0] for c in _readonly_cases()])
def test_read_only_destinations_raise_and_write_nothing(k):
    name, arrays, fn = _readonly_cases()[k]
    snaps = [a.copy() for a in arrays]
    with pytest.raises(ValueError, match="read-only"):
        fn()
    for a, s in zip(arrays, snaps):
        np.testing.assert_array_equal(a, s)


def test_read_only_part_of_a_concat_target_writes_no_part():
    w = np.zeros((4, 2), np.float32)
    r = _readonly((4, 3))
    with pytest.raises(ValueError, match="read-only"):
        ms.concat(w, r, 1)[:] = ms.from_numpy(np.ones((4, 5), np.float32)) * 2
    assert not w.any() and (r == 5).all()


@pytest.mark.parametrize("value, exc, match", [
    (lambda A: A[:, ::2], ValueError, "last axis must be contiguous"),
    (lambda A: np.ones((6, 4), np.float32).T, ValueError, "last axis must be contiguous"),
    (lambda A: np.ones((4, 6), np.float32)[::-1], ValueError, "row stride -24 bytes"),
    (lambda A: np.broadcast_to(np.ones(6, np.float32), (4, 6)), ValueError, "row stride 0 bytes"),
    (lambda A: np.ones((4, 6)), ms.DTypeError, "dtype float64 to a tensor of dtype float32"),
    (lambda A: np.ones((4, 6), np.float32)[None], ms.ShapeError, "not consistent with target"),
    (lambda A: np.ones((4, 6), ">f4"), ms.DTypeError, "native byte order"),
    (lambda A: np.zeros(4 * 6 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(4, 6), ValueError, "not aligned"),
    (lambda A: np.ones((4, 6), np.uint16), ms.DTypeError, "uint16 is not supported"),
    (lambda A: np.array(3, np.float32), ms.ShapeError, "0-d array"),
    (lambda A: [[1.0] * 6] * 4, TypeError, "cannot assign list"),
    (lambda A: 1j, TypeError, "cannot assign complex"),
    (lambda A: None, TypeError, "cannot assign NoneType"),
    (lambda A: ms.new_tensor((4, 6), dtype=np.float64) + 1, ms.DTypeError, "use ms.tcast"),
    (lambda A: ms.new_tensor((6, 4)), ms.ShapeError, "not consistent with target"),
    (lambda A: ms.scalar(1.0, np.float64), ms.DTypeError, "scalar of dtype"),
])
@pytest.mark.parametrize("saver", ["=", "+="])
def test_bad_values_are_typed_errors_that_write_nothing(value, exc, match, saver):
    t = ms.new_tensor((4, 6), init=-7.0, pad=True)
    A = np.arange(48, dtype=np.float32).reshape(4, 12)
    with pytest.raises(exc, match=match):
        ms_save(t, value(A), saver)
    assert (t.numpy() == -7).all()
    v = ms.flip(t, 0)                               # a view target raises the same
    with pytest.raises(exc, match=match):
        ms_save(v, value(A), saver)
    assert (t.numpy() == -7).all()


def test_bad_tensors_and_devices():
    with pytest.raises(ms.DeviceError, match="gpu tensors need the CUDA backend"):
        ms.new_tensor((2,), device=ms.gpu)
    for dt in (bool, np.complex64, np.uint16):
        with pytest.raises(ms.DTypeError, match="is not supported"):
            ms.new_tensor((2,), dtype=dt)
    with pytest.raises(ValueError, match="negative"):
        ms.new_tensor((2, -1))
    with pytest.raises(ms.IntegerArgumentError, match="write 1"):
        ms.new_tensor((2, 1.0))
    with pytest.raises(ms.ShapeError, match="the most this platform can address"):
        ms.new_tensor((2 ** 40, 2 ** 40))
    with pytest.raises(ValueError, match="cannot be stored in a int32"):
        ms.new_tensor((2,), float("nan"), dtype=np.int32)
    with pytest.raises(ms.DTypeError, match="dtype mismatch"):
        ms.copy(ms.new_tensor((2,)), ms.new_tensor((2,), dtype=np.float64))
    with pytest.raises(ms.ShapeError, match=r"Copy:shape mismatch:\(6,\) vs \(2,3\)"):
        ms.copy(ms.new_tensor((6,)), ms.new_tensor((2, 3)))
    t = ms.from_numpy(np.arange(20, dtype=np.float32).reshape(4, 5))
    with pytest.raises(IndexError, match="step 1"):
        t[::2]
    with pytest.raises(IndexError, match="out of range"):
        t[4]
    with pytest.raises(ms.IntegerArgumentError, match="write t"):
        t[1.0]
    with pytest.raises(ValueError, match="1 <= n <= 1024"):
        ms.set_num_threads(0)


def test_freed_and_exported_tensors():
    t = ms.new_tensor((3, 5), init=1.0, pad=True)
    cap = t.__dlpack__()                # never consumed: its deleter must give the pin back
    del cap
    ms.free_space(t)
    with pytest.raises(ms.FreedTensorError):
        t.numpy()
    with pytest.raises(ms.FreedTensorError):
        ms.free_space(t)
    t = ms.new_tensor((3, 5), init=1.0, pad=True)
    a = np.from_dlpack(t)
    sub = a[1:]
    del a
    with pytest.raises(BufferError, match="view"):
        ms.free_space(t)                # a view of the exported array still pins it
    m = memoryview(t)[1:]
    del sub
    with pytest.raises(BufferError):
        ms.free_space(t)
    assert m.tolist()[0] == [1.0] * 5
    m.release()
    ms.free_space(t)
    with pytest.raises(ms.MShadowError, match="does not own"):
        ms.free_space(ms.from_numpy(np.zeros(3, np.float32)))
    ro = ms.from_numpy(_readonly((2, 3)))
    with pytest.raises(BufferError, match="DLPack >= 1.0"):
        ro.__dlpack__()
    if not OLD_NUMPY:                   # (numpy < 2.1 has no read-only DLPack import)
        assert not np.from_dlpack(ro).flags.writeable
    assert memoryview(ro).readonly
    c = ms.TensorContainer((4, 4), init=2.0)
    view = np.asarray(c)
    with pytest.raises(BufferError, match="cannot reallocate"):
        c.resize((8, 8))
    assert tuple(c.shape) == (4, 4) and (view == 2).all()
    c.resize((2, 4))                    # fits: no reallocation, the view stays valid
    del view
    c.resize((8, 8))
    with pytest.raises(ms.FreedTensorError):
        d = ms.new_tensor((2, 2))
        e = d + 1
        ms.free_space(d)
        ms.new_tensor((2, 2))[:] = e
