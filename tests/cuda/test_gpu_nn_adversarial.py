"""Adversarial tests of the nn free functions, the sort and Random on gpu tensors: every gpu
call is compared with the same call on cpu tensors (the CPU path is the oracle; numpy or
hand-computed values where the CPU's is itself in question) on hostile inputs: aliasing
destinations, pitched rows, tiny and empty shapes, fractional / negative / NaN / out of
range labels and indices, every dtype the CPU takes, savers, expressions, streams, and
errors (which must be the CPU's type and store nothing)."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.errors import DeviceError, DTypeError, FreedTensorError, ShapeError

from gpu_testing import gpu_device, gpu_from  # noqa: F401  (gpu_device: autouse)
from test_gpu_dlpack import _crafted, _Producer

FLOATS = [np.float32, np.float64]
ALL = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]
_DL = {"f": 2, "i": 0, "u": 1}


# ---- helpers ------------------------------------------------------------------------------
def cpu_of(a):
    return ms.from_numpy(np.array(a, copy=True))


def same_bytes(g, c):
    """A gpu tensor's bytes (logical order) against a cpu tensor's / numpy array's."""
    c = c.numpy() if isinstance(c, ms.Tensor) else np.asarray(c)
    g = g.to_numpy()
    return g.dtype == c.dtype and g.shape == c.shape and g.tobytes() == c.tobytes()


def outcome(fn):
    """("ok", None) or (the exception's type, its message)."""
    try:
        fn()
    except Exception as e:       # noqa: BLE001  (the type is what is compared)
        return type(e), str(e)
    return "ok", None


def readonly_gpu(a):
    """A read-only gpu tensor holding ``a`` (a DLPack 1.0 capsule with the read-only flag),
    and the writable tensor whose memory it views."""
    t = gpu_from(a, pad=False)
    dt = np.dtype(a.dtype)
    ro = ms.from_dlpack(_Producer(_crafted(t, dtype=(_DL[dt.kind], dt.itemsize * 8, 1),
                                           flags=1)))
    assert ro.readonly
    return ro, t


def readonly_cpu(a):
    a = np.array(a, copy=True)
    a.flags.writeable = False
    t = ms.from_numpy(a)
    assert t.readonly
    return t


def freed_gpu(a, pad=True):
    t = gpu_from(a, pad)
    ms.free_space(t)
    return t


def freed_cpu(a):
    t = ms.new_tensor(a.shape, 0, dtype=a.dtype)
    t.numpy()[...] = a
    ms.free_space(t)
    return t


def both_raise(cpu_call, gpu_call, gpu_dsts, dst_before, types=None):
    """The CPU and GPU calls raise the same exception type (one of ``types`` when given)
    and the gpu destinations keep ``dst_before``."""
    ct, cmsg = outcome(cpu_call)
    gt, gmsg = outcome(gpu_call)
    assert ct != "ok", "the CPU call was expected to raise"
    assert gt == ct, (ct, cmsg, gt, gmsg)
    if types is not None:
        assert issubclass(gt, types), (gt, gmsg)
    for d, before in zip(gpu_dsts, dst_before):
        assert d.to_numpy().tobytes() == np.asarray(before).tobytes(), "stored before raising"


# ---- softmax -------------------------------------------------------------------------------
def _hostile_energy(rng, shape, dtype):
    e = (rng.standard_normal(shape) * 30).astype(dtype)
    if e.size == 0:
        return e
    flat = e.reshape(-1, shape[-1]) if len(shape) > 1 else e.reshape(1, -1)
    if flat.shape[0] >= 4 and flat.shape[1] >= 2:
        flat[0, 1] = np.nan                 # a NaN row
        flat[1, 0] = np.inf                 # an inf row
        flat[2, :] = -np.inf                # a row of -inf (0/0)
        flat[3, :] = np.finfo(dtype).max    # exp overflows nowhere: all equal
    return e


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 65), (65, 1), (5, 257), (6, 70), (0, 7),
                                   (3, 0)])
def test_softmax_rows_of_hostile_values_give_the_cpu_bits(dtype, shape):
    e = _hostile_energy(np.random.default_rng(11), shape, dtype)
    want = cpu_of(np.zeros(shape, dtype))
    ms.softmax(want, cpu_of(e))
    for pad in (True, False):
        d = ms.new_tensor(shape, 5.0, dtype=dtype, device=ms.gpu, pad=pad)
        ms.softmax(d, gpu_from(e, pad=not pad))     # pitched into dense and back
        assert same_bytes(d, want), (pad, d.to_numpy(), want.numpy())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 1, 70), (1, 5, 65), (3, 4, 1), (2, 3, 257), (0, 3, 2)])
def test_softmax_3d_of_hostile_values_matches_the_cpu(dtype, shape):
    rng = np.random.default_rng(12)
    e = (rng.standard_normal(shape) * 20).astype(dtype)
    if shape[0] and shape[2] >= 3:
        e[0, 0, 0] = np.nan
        e[0, :, 1] = -np.inf
        e[0, -1, 2] = np.inf
    want = cpu_of(np.zeros(shape, dtype))
    ms.softmax(want, cpu_of(e))
    d = ms.new_tensor(shape, 5.0, dtype=dtype, device=ms.gpu, pad=True)
    ms.softmax(d, gpu_from(e))
    tol = dict(rtol=1e-5, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d.to_numpy(), want.numpy(), **tol)   # NaN where the CPU's are
    g = gpu_from(e)
    ms.softmax(g, g)                                                   # in place
    np.testing.assert_allclose(g.to_numpy(), want.numpy(), **tol)


def test_softmax_into_a_view_shifted_back_by_a_row():
    """dst = rows 0..4, src = rows 1..5 of one pitched gpu allocation (row i is written
    before row i + 1, which src still needs, is read), 2-D and 3-D."""
    rng = np.random.default_rng(13)
    e = rng.standard_normal((6, 70)).astype(np.float32)
    t = gpu_from(e)
    want = cpu_of(np.zeros((5, 70), np.float32))
    ms.softmax(want, cpu_of(e[1:]))
    ms.softmax(t[0:5], t[1:6])
    assert same_bytes(t[0:5], want)
    assert t.to_numpy()[5].tobytes() == e[5].tobytes()
    e3 = rng.standard_normal((3, 4, 70)).astype(np.float64)
    t3 = gpu_from(e3)
    w3 = cpu_of(np.zeros((2, 4, 70)))
    ms.softmax(w3, cpu_of(e3[1:]))
    ms.softmax(t3.slice(0, 2), t3.slice(1, 3))
    np.testing.assert_allclose(t3.to_numpy()[:2], w3.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(t3.to_numpy()[2], e3[2])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float16])
def test_softmax_of_other_dtypes_raises_and_stores_nothing(dtype):
    """Integers: the CPU's DTypeError; float16: the CPU computes it, the GPU documents a
    DeviceError (float32 / float64 only). Either way nothing is stored."""
    a = np.arange(6).reshape(2, 3).astype(dtype)
    g = gpu_from(a)
    if dtype == np.float16:
        with pytest.raises(DeviceError):
            ms.softmax(g, g)
        assert same_bytes(g, a)
        return
    both_raise(lambda: ms.softmax(cpu_of(a), cpu_of(a)), lambda: ms.softmax(g, g), [g], [a],
               DTypeError)


# ---- softmax gradients ---------------------------------------------------------------------
def _labels(rng, shape, ncls, dtype):
    """Labels of ``dtype`` in range after truncation: fractions for floats."""
    lab = rng.integers(0, ncls, shape)
    if np.dtype(dtype).kind == "f":
        frac = rng.uniform(0, 0.9, shape)
        lab = lab + frac
    return lab.astype(dtype)


@pytest.mark.parametrize("ldtype", ALL)
@pytest.mark.parametrize("smooth", [False, True])
def test_softmax_grads_with_labels_of_every_dtype(ldtype, smooth):
    """Fractional float labels (truncated), -0.7 (truncates to 0), ignore_label 1.6 matching
    the labels 1.x; 2-D rows of 65 classes (pitched), 3-D (Y, C, N=70)."""
    rng = np.random.default_rng(21)
    for shape in [(9, 65), (3, 4, 70), (1, 1), (2, 1, 1)]:
        ncls = shape[1]
        lshape = (shape[0],) if len(shape) == 2 else (shape[0], shape[2])
        lab = _labels(rng, lshape, ncls, ldtype)
        if np.dtype(ldtype).kind == "f" and lab.size > 2:
            lab.flat[0] = -0.7                     # truncates to 0: in range
            lab.flat[1] = min(ncls - 1, 1) + 0.99
        src = rng.standard_normal(shape).astype(np.float32)
        for ignore in (None, 1.6, -1):
            call = ((lambda d, s, l: ms.nn.smooth_softmax_grad(d, s, l, 0.3, ignore)) if smooth
                    else (lambda d, s, l: ms.nn.softmax_grad(d, s, l, ignore)))
            want = cpu_of(np.zeros(shape, np.float32))
            call(want, cpu_of(src), cpu_of(lab))
            d = ms.new_tensor(shape, np.nan, device=ms.gpu, pad=True)
            call(d, gpu_from(src, pad=False), gpu_from(lab))
            assert same_bytes(d, want), (shape, ignore)
            s = gpu_from(src)
            call(s, s, gpu_from(lab))                # dst is src
            assert same_bytes(s, want), (shape, ignore, "in place")


def test_smooth_softmax_grad_of_hostile_alphas():
    """alpha rounded to float32 as mshadow's float: -0, a float16, an int, the smallest
    subnormal, NaN, near float32's max; one class (the share is never used)."""
    rng = np.random.default_rng(25)
    for shape in [(4, 70), (3, 1), (2, 3, 65)]:
        src = rng.standard_normal(shape).astype(np.float32)
        lshape = (shape[0],) if len(shape) == 2 else (shape[0], shape[2])
        lab = rng.integers(0, shape[1], lshape).astype(np.float32)
        for alpha in (-0.0, np.float16(0.3), 7, -1e-45, np.nan, 3.0e38):
            c = cpu_of(np.zeros(shape, np.float32))
            ms.nn.smooth_softmax_grad(c, cpu_of(src), cpu_of(lab), alpha)
            g = gpu_from(np.zeros(shape, np.float32))
            ms.nn.smooth_softmax_grad(g, gpu_from(src), gpu_from(lab), alpha)
            assert same_bytes(g, c), (shape, alpha)


@pytest.mark.parametrize("smooth", [False, True])
def test_softmax_grad_into_a_shifted_view_and_a_label_in_dst(smooth):
    """dst = rows 1..4 of a gpu allocation, src = rows 0..3 of it; then the labels are a
    row of the very tensor the gradient is written into (read before any store)."""
    rng = np.random.default_rng(22)
    a = rng.standard_normal((5, 66)).astype(np.float64)
    lab = np.array([3, 0, 65, 7], np.float64)
    call = ((lambda d, s, l: ms.nn.smooth_softmax_grad(d, s, l, 0.25)) if smooth
            else (lambda d, s, l: ms.nn.softmax_grad(d, s, l)))
    want = cpu_of(np.zeros((4, 66)))
    call(want, cpu_of(a[:4]), cpu_of(lab))
    t = gpu_from(a)
    call(t[1:5], t[0:4], gpu_from(lab))
    assert same_bytes(t[1:5], want)
    assert t.to_numpy()[0].tobytes() == a[0].tobytes()
    # the labels are row 0 of the 4-row tensor dst: b[0] = [1, 0, 2, 1] as labels of 4 rows
    b = rng.standard_normal((4, 4)).astype(np.float32)
    b[0] = [1.5, 0, 2.9, 3]
    src = rng.standard_normal((4, 4)).astype(np.float32)
    bc = cpu_of(b)
    call(bc, cpu_of(src), bc[0])
    bg = gpu_from(b)
    call(bg, gpu_from(src), bg[0])
    assert same_bytes(bg, bc)


@pytest.mark.parametrize("ldtype", [np.float32, np.float16, np.int8, np.int64])
def test_softmax_grad_bad_labels_raise_the_cpus_error_and_store_nothing(ldtype):
    rng = np.random.default_rng(23)
    src = rng.standard_normal((4, 5)).astype(np.float32)
    dst0 = np.full((4, 5), 7, np.float32)
    bad = [[0, 1, 5, 2], [0, -1, 2, 3], [0, 1, 2, 127]]
    if np.dtype(ldtype).kind == "f":
        bad += [[0, np.nan, 1, 2], [np.inf, 0, 1, 2], [0, 1, 2, -1.0], [4.999, 5.0, 0, 0]]
    for lab in bad:
        lab = np.array(lab).astype(ldtype)
        for smooth in (False, True):
            f = ((lambda d, s, l: ms.nn.smooth_softmax_grad(d, s, l, 0.1)) if smooth
                 else ms.nn.softmax_grad)
            g = gpu_from(dst0)
            both_raise(lambda: f(cpu_of(dst0), cpu_of(src), cpu_of(lab)),
                       lambda: f(g, gpu_from(src), gpu_from(lab)), [g], [dst0],
                       (ValueError, IndexError))
    g = gpu_from(dst0)     # ignore_label NaN / inf: a ValueError on both
    for ign in (np.nan, np.inf):
        both_raise(lambda: ms.nn.softmax_grad(cpu_of(dst0), cpu_of(src),
                                              cpu_of(np.zeros(4, ldtype)), ign),
                   lambda: ms.nn.softmax_grad(g, gpu_from(src), gpu_from(np.zeros(4, ldtype)),
                                              ign), [g], [dst0], ValueError)


@pytest.mark.parametrize("smooth", [False, True])
def test_softmax_grad_labels_equal_to_ignore_label_after_truncation(smooth):
    """mshadow compares int(label) with int(ignore_label): -1.5 and -1 are ignored by
    -1.9; 255 of uint8 by 255; an out-of-range label that is ignored is no error."""
    rng = np.random.default_rng(24)
    src = rng.standard_normal((5, 70)).astype(np.float64)
    cases = [(np.array([-1.5, 0, -1, 69.9, -0.5], np.float32), -1.9),
             (np.array([-1, 3, -1, 2, 0], np.int8), -1),
             (np.array([255, 0, 255, 69, 1], np.uint8), 255),
             (np.array([99, 0, 99.7, 1, 2], np.float64), 99.2),
             (np.array([-7, 1, 2, 3, 4], np.int64), -7.99)]
    for lab, ignore in cases:
        f = ((lambda d, s_, l: ms.nn.smooth_softmax_grad(d, s_, l, 0.2, ignore)) if smooth
             else (lambda d, s_, l: ms.nn.softmax_grad(d, s_, l, ignore)))
        want = cpu_of(np.zeros((5, 70)))
        f(want, cpu_of(src), cpu_of(lab))
        d = ms.new_tensor((5, 70), np.nan, dtype=np.float64, device=ms.gpu, pad=True)
        f(d, gpu_from(src), gpu_from(lab))
        assert same_bytes(d, want), (lab, ignore)
        ignored = np.trunc(lab.astype(np.float64)) == np.trunc(ignore)
        assert ignored.any() and (want.numpy()[ignored] == 0).all()      # hand-computed
        assert (want.numpy()[~ignored] != 0).all()


def test_softmax_grad_errors_of_shapes_devices_readonly_freed():
    src = np.ones((3, 4), np.float32)
    lab = np.array([0, 1, 2], np.float32)
    d0 = np.full((3, 4), 9, np.float32)
    g = gpu_from(d0)
    cases = [
        # (cpu call, gpu call, expected type)
        (lambda: ms.nn.softmax_grad(cpu_of(d0), cpu_of(src[:2]), cpu_of(lab)),
         lambda: ms.nn.softmax_grad(g, gpu_from(src[:2]), gpu_from(lab)), ShapeError),
        (lambda: ms.nn.softmax_grad(cpu_of(d0), cpu_of(src), cpu_of(lab[:2])),
         lambda: ms.nn.softmax_grad(g, gpu_from(src), gpu_from(lab[:2])), ShapeError),
        (lambda: ms.nn.softmax_grad(cpu_of(d0), cpu_of(src.astype(np.float64)), cpu_of(lab)),
         lambda: ms.nn.softmax_grad(g, gpu_from(src.astype(np.float64)), gpu_from(lab)),
         DTypeError),
        (lambda: ms.nn.softmax_grad(readonly_cpu(d0), cpu_of(src), cpu_of(lab)),
         lambda: ms.nn.softmax_grad(readonly_gpu(d0)[0], gpu_from(src), gpu_from(lab)),
         ValueError),
        (lambda: ms.nn.softmax_grad(cpu_of(d0), freed_cpu(src), cpu_of(lab)),
         lambda: ms.nn.softmax_grad(g, freed_gpu(src), gpu_from(lab)), FreedTensorError),
        (lambda: ms.nn.softmax_grad(cpu_of(d0), cpu_of(src), freed_cpu(lab)),
         lambda: ms.nn.softmax_grad(g, gpu_from(src), freed_gpu(lab)), FreedTensorError),
    ]
    for cpu_call, gpu_call, typ in cases:
        both_raise(cpu_call, gpu_call, [g], [d0], typ)
    for args in [(g, cpu_of(src), gpu_from(lab)), (g, gpu_from(src), cpu_of(lab))]:
        with pytest.raises(DeviceError):
            ms.nn.softmax_grad(*args)
        assert same_bytes(g, d0)


# ---- row scatters --------------------------------------------------------------------------
@pytest.mark.parametrize("idtype", ALL)
@pytest.mark.parametrize("dtype", FLOATS)
def test_add_take_grad_clamps_hostile_indices_as_the_cpu(idtype, dtype):
    """Fractions, negatives (clamped to 0), past the end (clamped to K-1), repeats; rows of
    65 and 70 columns (pitched), one column, one row."""
    rng = np.random.default_rng(31)
    for K, cols in [(6, 65), (5, 70), (3, 1), (1, 4)]:
        if np.dtype(idtype).kind == "u":
            idx = np.array([0, 2, 200, 1, 1, 255, 3, 0, 9]).astype(idtype)
        elif np.dtype(idtype).kind == "i":
            idx = np.array([0, -3, 100, 1, 1, -128, 3, 0, 9]).astype(idtype)
        else:
            idx = np.array([0.9, -3.5, 100.25, 1.999, 1, -0.9, 3.5, 0, 9.1]).astype(idtype)
        src = rng.standard_normal((len(idx), cols)).astype(dtype)
        dst0 = rng.standard_normal((K, cols)).astype(dtype)
        want = cpu_of(dst0)
        ms.nn.add_take_grad(want, cpu_of(idx), cpu_of(src))
        for pad in (True, False):
            d = gpu_from(dst0, pad)
            ms.nn.add_take_grad(d, gpu_from(idx), gpu_from(src, not pad))
            assert same_bytes(d, want), (K, cols, pad)


@pytest.mark.parametrize("idtype", [np.float32, np.int8, np.uint8, np.int64, np.float16])
def test_add_take_grad_large_batch_and_index_fill_of_hostile_indices(idtype):
    rng = np.random.default_rng(32)
    sorted_ = np.array([4, 0, 0, 3.7, 2, 4, 1.5]).astype(idtype)      # not ascending, repeats
    index = np.array([0, 6, 2.2, 2, 5.9, 1, 3]).astype(idtype)
    src = rng.standard_normal((7, 70))
    dst0 = rng.standard_normal((5, 70))
    want = cpu_of(dst0)
    ms.nn.add_take_grad_large_batch(want, cpu_of(sorted_), cpu_of(index), cpu_of(src))
    d = gpu_from(dst0)
    ms.nn.add_take_grad_large_batch(d, gpu_from(sorted_), gpu_from(index), gpu_from(src))
    assert same_bytes(d, want)
    # index_fill: a repeated row keeps the last src row stored into it
    want = cpu_of(dst0)
    ms.nn.index_fill(want, cpu_of(sorted_), cpu_of(src))
    d = gpu_from(dst0)
    ms.nn.index_fill(d, gpu_from(sorted_), gpu_from(src))
    assert same_bytes(d, want)
    np.testing.assert_array_equal(want.numpy()[0], src[2])     # hand-computed: last wins
    np.testing.assert_array_equal(want.numpy()[4], src[5])


@pytest.mark.parametrize("dtype", ALL)
def test_index_fill_of_every_dtype_pitched_and_dense(dtype):
    rng = np.random.default_rng(33)
    src = (rng.standard_normal((6, 65)) * 50).astype(dtype)
    dst0 = (rng.standard_normal((4, 65)) * 50).astype(dtype)
    if dtype == np.float32:      # NaNs with payloads (and signs): a copy keeps their bits
        src.view(np.uint32)[5, :3] = [0x7FC01234, 0xFFC00001, 0x7F800001]
    elif dtype == np.float16:
        src.view(np.uint16)[5, :2] = [0x7E01, 0xFC01]
    idx = np.array([3, 1, 3, 0, 1, 3], np.int32)
    want = cpu_of(dst0)
    ms.nn.index_fill(want, cpu_of(idx), cpu_of(src))
    for pad in (True, False):
        d = gpu_from(dst0, pad)
        ms.nn.index_fill(d, gpu_from(idx), gpu_from(src, not pad))
        assert same_bytes(d, want), pad
    np.testing.assert_array_equal(want.numpy()[3], src[5])
    np.testing.assert_array_equal(want.numpy()[2], dst0[2])


def test_scatters_of_a_source_that_is_the_destination_shifted():
    """src and dst views of one gpu allocation shifted by a row (and src == dst): every
    source row is read as it was before the call."""
    rng = np.random.default_rng(34)
    a = rng.standard_normal((7, 70)).astype(np.float32)
    idx = np.array([0, 0, 2, 5, 1, 5], np.float32)
    for fn in ("add_take_grad", "index_fill"):
        f = getattr(ms.nn, fn)
        c = cpu_of(a)
        f(c[0:6], cpu_of(idx), c[1:7])
        g = gpu_from(a)
        f(g[0:6], gpu_from(idx), g[1:7])
        assert same_bytes(g, c), fn
        c = cpu_of(a)
        f(c[1:7], cpu_of(idx), c[0:6])
        g = gpu_from(a)
        f(g[1:7], gpu_from(idx), g[0:6])
        assert same_bytes(g, c), fn
        c = cpu_of(a[:6])
        f(c, cpu_of(idx), c)
        g = gpu_from(a[:6])
        f(g, gpu_from(idx), g)
        assert same_bytes(g, c), fn
    c = cpu_of(a)
    ms.nn.add_take_grad_large_batch(c[0:6], cpu_of(idx), cpu_of(idx[::-1]), c[1:7])
    g = gpu_from(a)
    ms.nn.add_take_grad_large_batch(g[0:6], gpu_from(idx), gpu_from(idx[::-1]), g[1:7])
    assert same_bytes(g, c)


def test_scatter_whose_index_is_a_row_of_the_destination():
    """The index tensor is row 0 of dst itself: it is read (copied to the host) before any
    store, on both devices."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4) / 4
    a[0] = [2.5, 1, 3.2, 0]          # row 0 is the index
    src = np.arange(16, 32, dtype=np.float32).reshape(4, 4)
    for fn in ("add_take_grad", "index_fill"):
        c = cpu_of(a)
        getattr(ms.nn, fn)(c, c[0], cpu_of(src))
        g = gpu_from(a)
        getattr(ms.nn, fn)(g, g[0], gpu_from(src))
        assert same_bytes(g, c), fn
        # all three in one allocation: dst rows 1..3, the index row 0, the source rows 0..3
        b = a.copy()
        b[0] = [0.5, 2.9, -4 if fn == "add_take_grad" else 0, 1]     # -4: clamped to 0
        c = cpu_of(b)
        getattr(ms.nn, fn)(c[1:4], c[0], c)
        g = gpu_from(b)
        getattr(ms.nn, fn)(g[1:4], g[0], g)
        assert same_bytes(g, c), fn


def test_scatter_errors_store_nothing():
    rng = np.random.default_rng(35)
    dst0 = rng.standard_normal((4, 70)).astype(np.float32)
    src = rng.standard_normal((3, 70)).astype(np.float32)
    g = gpu_from(dst0)
    G = lambda a: gpu_from(np.asarray(a))         # noqa: E731
    C = lambda a: cpu_of(np.asarray(a))           # noqa: E731
    cases = [
        # IndexFill / AddTakeGradLargeBatch do not clamp
        ("index_fill", (C([0, 4, 1]), C(src)), (G([0, 4, 1]), G(src)), IndexError),
        ("index_fill", (C([0, -1, 1]), C(src)), (G([0, -1, 1]), G(src)), IndexError),
        ("index_fill", (C([0, 1.0, np.nan]), C(src)), (G([0, 1.0, np.nan]), G(src)),
         ValueError),
        ("add_take_grad", (C([0, np.inf, 1.0]), C(src)), (G([0, np.inf, 1.0]), G(src)),
         ValueError),
        ("add_take_grad", (C([0, 1]), C(src)), (G([0, 1]), G(src)), ShapeError),
        ("add_take_grad", (C([0, 1, 2]), C(src[:, :5])), (G([0, 1, 2]), G(src[:, :5])),
         ShapeError),
        ("add_take_grad", (C([0, 1, 2]), C(src.astype(np.float64))),
         (G([0, 1, 2]), G(src.astype(np.float64))), DTypeError),
        ("add_take_grad_large_batch", (C([0, 1, 3]), C([0, 1, 3]), C(src)),
         (G([0, 1, 3]), G([0, 1, 3]), G(src)), IndexError),
        ("add_take_grad_large_batch", (C([0, 1, 4]), C([0, 1, 2]), C(src)),
         (G([0, 1, 4]), G([0, 1, 2]), G(src)), IndexError),
        ("add_take_grad_large_batch", (C([0, 1]), C([0, 1, 2]), C(src)),
         (G([0, 1]), G([0, 1, 2]), G(src)), ShapeError),
        ("index_fill", (freed_cpu(np.array([0, 1, 2])), C(src)),
         (freed_gpu(np.array([0, 1, 2])), G(src)), FreedTensorError),
        ("add_take_grad", (C([0, 1, 2]), freed_cpu(src)), (G([0, 1, 2]), freed_gpu(src)),
         FreedTensorError),
    ]
    for fn, cargs, gargs, typ in cases:
        f = getattr(ms.nn, fn)
        both_raise(lambda: f(cpu_of(dst0), *cargs), lambda: f(g, *gargs), [g], [dst0], typ)
    for fn in ("add_take_grad", "index_fill"):
        f = getattr(ms.nn, fn)
        both_raise(lambda: f(readonly_cpu(dst0), C([0, 1, 2]), C(src)),
                   lambda: f(readonly_gpu(dst0)[0], G([0, 1, 2]), G(src)), [g], [dst0],
                   ValueError)
        both_raise(lambda: f(freed_cpu(dst0), C([0, 1, 2]), C(src)),
                   lambda: f(freed_gpu(dst0), G([0, 1, 2]), G(src)), [g], [dst0],
                   FreedTensorError)
        for args in [(G([0, 1, 2]), C(src)), (C([0, 1, 2]), G(src))]:
            with pytest.raises(DeviceError):
                f(g, *args)
            assert same_bytes(g, dst0)


def test_scatters_of_empty_indices_and_no_rows():
    for fn in ("add_take_grad", "index_fill"):
        f = getattr(ms.nn, fn)
        d0 = np.full((3, 70), 2, np.float32)
        c, g = cpu_of(d0), gpu_from(d0)
        f(c, cpu_of(np.zeros(0, np.int32)), cpu_of(np.zeros((0, 70), np.float32)))
        f(g, gpu_from(np.zeros(0, np.int32)), gpu_from(np.zeros((0, 70), np.float32)))
        assert same_bytes(g, c) and same_bytes(g, d0)
        c, g = cpu_of(np.zeros((0, 70), np.float32)), gpu_from(np.zeros((0, 70), np.float32))
        f(c, cpu_of(np.zeros(0, np.int32)), cpu_of(np.zeros((0, 70), np.float32)))
        f(g, gpu_from(np.zeros(0, np.int32)), gpu_from(np.zeros((0, 70), np.float32)))
        g = gpu_from(np.zeros((0, 4), np.float32))
        both_raise(lambda: f(cpu_of(np.zeros((0, 4), np.float32)), cpu_of([0]),
                             cpu_of(np.ones((1, 4), np.float32))),
                   lambda: f(g, gpu_from(np.array([0])), gpu_from(np.ones((1, 4), np.float32))),
                   [], [], (ShapeError, IndexError))
        c, g = cpu_of(np.ones((2, 0), np.float32)), gpu_from(np.ones((2, 0), np.float32))
        f(c, cpu_of([1, 0, 1]), cpu_of(np.ones((3, 0), np.float32)))
        f(g, gpu_from(np.array([1, 0, 1])), gpu_from(np.ones((3, 0), np.float32)))
        assert same_bytes(g, c)


def test_add_take_grad_of_float16_and_ints_on_the_gpu_is_refused_storing_nothing():
    """The CPU adds float16 / integer rows; the GPU documents float32 / float64 only (a
    DeviceError), and must store nothing."""
    for dtype in (np.float16, np.int32, np.uint8):
        dst0 = np.ones((3, 5), dtype)
        g = gpu_from(dst0)
        want = cpu_of(dst0)
        ms.nn.add_take_grad(want, cpu_of([0, 2]), cpu_of(np.ones((2, 5), dtype)))
        with pytest.raises(DeviceError):
            ms.nn.add_take_grad(g, gpu_from(np.array([0, 2])), gpu_from(np.ones((2, 5), dtype)))
        assert same_bytes(g, dst0)


# ---- sorting -------------------------------------------------------------------------------
def _hostile_keys(rng, dtype, n):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        k = rng.integers(-3, 3, n).astype(dtype)        # many ties
        specials = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf,
                             np.finfo(dtype).max, -np.finfo(dtype).max, np.finfo(dtype).tiny,
                             -np.finfo(dtype).tiny, np.finfo(dtype).smallest_subnormal],
                            dtype=dtype)
        pos = rng.choice(n, size=min(n, 3 * len(specials)), replace=False)
        k[pos] = np.resize(specials, len(pos))
        # a NaN with a payload and its sign set
        if n > 5 and dt.itemsize == 4:
            k.view(np.uint32)[5] = 0xFFC00001
        return k
    info = np.iinfo(dtype)
    k = rng.integers(-3, 3, n).astype(np.int64)
    k[::5] = info.min
    k[1::7] = info.max
    k[2::9] = info.max - 1
    k[3::11] = info.min + 1
    return np.clip(k, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("kdtype", ALL)
@pytest.mark.parametrize("n", [1, 257, 700])        # one, a tile and one, tiles
def test_sort_by_key_of_hostile_keys_gives_the_cpu_bytes(kdtype, n):
    rng = np.random.default_rng(41 + n)
    k = _hostile_keys(rng, kdtype, n)
    vdtype = ALL[(ALL.index(kdtype) + 3) % len(ALL)]        # values of another dtype
    v = np.arange(n).astype(vdtype) if np.dtype(vdtype).itemsize > 1 else \
        (np.arange(n) % 100).astype(vdtype)
    for asc in (True, False):
        kc, vc = cpu_of(k), cpu_of(v)
        ms.nn.sort_by_key(kc, vc, asc)
        kg, vg = gpu_from(k), gpu_from(v)
        ms.nn.sort_by_key(kg, vg, asc)
        assert same_bytes(kg, kc), asc
        assert same_bytes(vg, vc), asc


def test_sort_by_key_of_keys_that_are_the_values_or_overlap_them():
    rng = np.random.default_rng(42)
    for dtype in (np.float32, np.int8):
        a = _hostile_keys(rng, dtype, 301)
        for asc in (True, False):
            c = cpu_of(a)
            ms.nn.sort_by_key(c, c, asc)                 # keys == values
            g = gpu_from(a)
            ms.nn.sort_by_key(g, g, asc)
            assert same_bytes(g, c)
            # keys = t[0:300], values = t[1:301]: the same memory shifted by one element
            c = cpu_of(a)
            ms.nn.sort_by_key(c.slice(0, 300), c.slice(1, 301), asc)
            g = gpu_from(a)
            ms.nn.sort_by_key(g.slice(0, 300), g.slice(1, 301), asc)
            assert same_bytes(g, c)
            c = cpu_of(a)
            ms.nn.sort_by_key(c.slice(1, 301), c.slice(0, 300), asc)
            g = gpu_from(a)
            ms.nn.sort_by_key(g.slice(1, 301), g.slice(0, 300), asc)
            assert same_bytes(g, c)


def test_sorts_whose_values_are_the_keys_memory_seen_as_another_dtype():
    """float32 keys and int32 values over the same bytes (numpy's view on the CPU, a DLPack
    view on the GPU): both gathered before either is written, keys first, then values."""
    k = _hostile_keys(np.random.default_rng(45), np.float32, 300)
    for asc in (True, False):
        kc = cpu_of(k)
        vc = ms.from_numpy(kc.numpy().view(np.int32))
        ms.nn.sort_by_key(kc, vc, asc)
        kg = gpu_from(k, pad=False)
        vg = ms.from_dlpack(_Producer(_crafted(kg, dtype=(0, 32, 1))))
        ms.nn.sort_by_key(kg, vg, asc)
        assert same_bytes(kg, kc) and same_bytes(vg, vc)
    for dtype in (np.float64, np.uint8):
        v = _hostile_keys(np.random.default_rng(46), dtype, 259)
        c = cpu_of(v)
        ms.nn.vectorized_sort(c, c)                 # values are the segments
        g = gpu_from(v)
        ms.nn.vectorized_sort(g, g)
        assert same_bytes(g, c)
        c = cpu_of(v)
        ms.nn.vectorized_sort(c.slice(0, 258), c.slice(1, 259))
        g = gpu_from(v)
        ms.nn.vectorized_sort(g.slice(0, 258), g.slice(1, 259))
        assert same_bytes(g, c)


def test_sort_by_key_descending_with_all_ties_and_all_nans_is_stable():
    """Hand-computed: a stable sort keeps the values' order among equal keys in both
    directions; NaNs (of both signs) equal each other, -0 equals +0."""
    for k in (np.zeros(300, np.float32), np.full(300, np.nan, np.float64),
              np.where(np.arange(300) % 2, 0.0, -0.0).astype(np.float32),
              np.where(np.arange(300) % 3, np.nan, -np.nan).astype(np.float16)):
        for asc in (True, False):
            kg, vg = gpu_from(k), gpu_from(np.arange(300, dtype=np.int32))
            ms.nn.sort_by_key(kg, vg, asc)
            np.testing.assert_array_equal(vg.to_numpy(), np.arange(300))
            assert kg.to_numpy().tobytes() == k.tobytes()


@pytest.mark.parametrize("vdtype", ALL)
def test_vectorized_sort_of_hostile_values_and_unsorted_segments(vdtype):
    rng = np.random.default_rng(43)
    n = 300
    v = _hostile_keys(rng, vdtype, n)
    fsegs = rng.integers(-2, 3, n).astype(np.float32)                 # not sorted
    fsegs[::13], fsegs[1::13], fsegs[2::11] = np.nan, -np.nan, -0.0     # NaN segments last
    for segs in (np.sort(rng.integers(0, 7, n)).astype(np.int32), fsegs, np.zeros(n, np.uint8)):
        vc, sc = cpu_of(v), cpu_of(segs)
        ms.nn.vectorized_sort(vc, sc)
        vg, sg = gpu_from(v), gpu_from(segs)
        ms.nn.vectorized_sort(vg, sg)
        assert same_bytes(vg, vc)
        assert same_bytes(sg, sc)


def test_sorts_on_a_stream_and_empty():
    s = ms.new_stream(ms.gpu)
    try:
        rng = np.random.default_rng(44)
        k = _hostile_keys(rng, np.float64, 600)
        kc, vc = cpu_of(k), cpu_of(np.arange(600, dtype=np.float32))
        ms.nn.sort_by_key(kc, vc, False)
        kg = ms.new_tensor((600,), None, dtype=np.float64, device=ms.gpu, stream=s)
        vg = ms.new_tensor((600,), None, dtype=np.float32, device=ms.gpu, stream=s)
        ms.copy(kg, cpu_of(k), s)
        ms.copy(vg, cpu_of(np.arange(600, dtype=np.float32)), s)
        ms.nn.sort_by_key(kg, vg, False)
        s.wait()
        assert same_bytes(kg, kc) and same_bytes(vg, vc)
        ms.nn.vectorized_sort(vg, kg)
        vc2, kc2 = vc, kc
        ms.nn.vectorized_sort(vc2, kc2)
        s.wait()
        assert same_bytes(kg, kc2) and same_bytes(vg, vc2)
    finally:
        ms.delete_stream(s)
    e = ms.new_tensor((0,), device=ms.gpu)
    ms.nn.sort_by_key(e, ms.new_tensor((0,), device=ms.gpu, dtype=np.int8))
    ms.nn.vectorized_sort(e, ms.new_tensor((0,), device=ms.gpu, dtype=np.int8))


def test_sort_errors_store_nothing():
    k0 = np.array([3, 1, 2, 0], np.float32)
    v0 = np.array([10, 20, 30, 40], np.int32)
    for fn in ("sort_by_key", "vectorized_sort"):
        f = getattr(ms.nn, fn)
        kg, vg = gpu_from(k0), gpu_from(v0)
        cases = [
            (lambda: f(cpu_of(k0), cpu_of(v0[:3])), lambda: f(kg, gpu_from(v0[:3])),
             ShapeError),
            (lambda: f(cpu_of(k0), readonly_cpu(v0)), lambda: f(kg, readonly_gpu(v0)[0]),
             ValueError),
            (lambda: f(readonly_cpu(k0), cpu_of(v0)), lambda: f(readonly_gpu(k0)[0], vg),
             ValueError),
            (lambda: f(cpu_of(k0), freed_cpu(v0)), lambda: f(kg, freed_gpu(v0)),
             FreedTensorError),
            (lambda: f(freed_cpu(k0), cpu_of(v0)), lambda: f(freed_gpu(k0), vg),
             FreedTensorError),
            (lambda: f(cpu_of(k0.reshape(2, 2)), cpu_of(v0)),
             lambda: f(gpu_from(k0.reshape(2, 2)), vg), ShapeError),
        ]
        for cpu_call, gpu_call, typ in cases:
            both_raise(cpu_call, gpu_call, [kg, vg], [k0, v0], typ)
        for args in [(kg, cpu_of(v0)), (cpu_of(k0), vg)]:
            with pytest.raises(DeviceError):
                f(*args)
            assert same_bytes(kg, k0) and same_bytes(vg, v0)


# ---- map_reduce_keep_lowest / high_dim -----------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.int64])
@pytest.mark.parametrize("saver", ["plusto", "minusto"])
def test_map_reduce_of_integers_gives_the_cpu_bits(dtype, saver):
    rng = np.random.default_rng(51)
    a = rng.integers(0, 9, (3, 5, 70)).astype(dtype)
    for reducer in (ms.red.sum, ms.red.maximum, ms.red.minimum):
        for scale in ((3,) if np.dtype(dtype).kind == "u" else (3, -2)):
            d0 = rng.integers(0, 9, 70).astype(dtype)
            want = cpu_of(d0)
            ms.nn.map_reduce_keep_lowest(want, cpu_of(a) * 2 + 1, saver, reducer, scale)
            g = gpu_from(d0)
            ms.nn.map_reduce_keep_lowest(g, gpu_from(a) * 2 + 1, saver, reducer, scale)
            assert same_bytes(g, want), (reducer, scale)
            d1 = rng.integers(0, 9, 5).astype(dtype)
            want = cpu_of(d1)
            ms.nn.map_reduce_keep_high_dim(want, cpu_of(a), 1, saver, reducer, scale)
            g = gpu_from(d1)
            ms.nn.map_reduce_keep_high_dim(g, gpu_from(a), 1, saver, reducer, scale)
            assert same_bytes(g, want), (reducer, scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_map_reduce_of_floats_with_nan_and_a_destination_inside_the_source(dtype):
    rng = np.random.default_rng(52)
    a = rng.standard_normal((6, 70)).astype(dtype)
    a[2, 3] = np.nan
    a[4, 5] = -np.inf
    tol = dict(rtol=2e-3, atol=1e-2) if dtype == np.float16 else dict(rtol=1e-5, atol=1e-6)
    for reducer in (ms.red.sum, ms.red.maximum, ms.red.minimum):
        # dst is row 0 of the source itself: the reduction reads row 0 as it was
        c = cpu_of(a)
        ms.nn.map_reduce_keep_lowest(c[0], c, "plusto", reducer, 0.5)
        g = gpu_from(a)
        ms.nn.map_reduce_keep_lowest(g[0], g, "plusto", reducer, 0.5)
        if reducer is ms.red.sum:
            np.testing.assert_allclose(g.to_numpy(), c.numpy(), **tol)
        else:
            assert same_bytes(g, c), reducer
        red = {ms.red.sum: np.sum, ms.red.maximum: np.max, ms.red.minimum: np.min}[reducer]
        want = a[0].astype(np.float64) + 0.5 * red(a.astype(np.float64), axis=0)
        np.testing.assert_allclose(c.numpy()[0], want, **tol)


@pytest.mark.parametrize("saver", ["plusto", "minusto"])
def test_map_reduce_of_float16_maximum_with_a_scale_and_a_saver_gives_the_cpu_bits(saver):
    # regression: the GPU kernel added the float32 scaled value and rounded once
    # one element, hand-computed: max = 4.516, scale -3.3: the CPU stores
    # d - f16(4.516 * -3.3f) (minusto) / d + f16(...) (plusto), rounded again
    a = np.array([[4.516], [1.0]], np.float16)
    d0 = np.array([-7.906], np.float16)
    s = np.float32(-3.3)
    sign = 1 if saver == "plusto" else -1
    scaled = (np.float32(a.max()) * s).astype(np.float16)
    hand = (np.float32(d0[0]) + sign * np.float32(scaled)).astype(np.float16)
    c = cpu_of(d0)
    ms.nn.map_reduce_keep_lowest(c, cpu_of(a), saver, ms.red.maximum, -3.3)
    assert c.numpy()[0] == hand
    rng = np.random.default_rng(53)
    big = (rng.standard_normal((7, 70)) * 10).astype(np.float16)
    dbig = (rng.standard_normal(70) * 10).astype(np.float16)
    for src, dst in ((a, d0), (big, dbig)):
        for red in (ms.red.maximum, ms.red.minimum):
            c = cpu_of(dst)
            ms.nn.map_reduce_keep_lowest(c, cpu_of(src), saver, red, -3.3)
            g = gpu_from(dst)
            ms.nn.map_reduce_keep_lowest(g, gpu_from(src), saver, red, -3.3)
            assert same_bytes(g, c), red


def test_map_reduce_errors_store_nothing():
    a = np.ones((3, 4), np.float32)
    d0 = np.full(4, 5, np.float32)
    g = gpu_from(d0)
    cases = [
        (lambda: ms.nn.map_reduce_keep_lowest(cpu_of(np.zeros(5, np.float32)), cpu_of(a)),
         lambda: ms.nn.map_reduce_keep_lowest(gpu_from(np.full(5, 5, np.float32)),
                                              gpu_from(a)), ShapeError),
        (lambda: ms.nn.map_reduce_keep_lowest(readonly_cpu(d0), cpu_of(a)),
         lambda: ms.nn.map_reduce_keep_lowest(readonly_gpu(d0)[0], gpu_from(a)), ValueError),
        (lambda: ms.nn.map_reduce_keep_lowest(cpu_of(d0), freed_cpu(a)),
         lambda: ms.nn.map_reduce_keep_lowest(g, freed_gpu(a)), FreedTensorError),
        (lambda: ms.nn.map_reduce_keep_lowest(cpu_of(d0), cpu_of(a.astype(np.float64))),
         lambda: ms.nn.map_reduce_keep_lowest(g, gpu_from(a.astype(np.float64))), DTypeError),
        (lambda: ms.nn.map_reduce_keep_lowest(cpu_of(d0), cpu_of(np.ones((0, 4), np.float32))),
         lambda: ms.nn.map_reduce_keep_lowest(g, gpu_from(np.ones((0, 4), np.float32))),
         None),
        (lambda: ms.nn.map_reduce_keep_high_dim(cpu_of(d0), cpu_of(a), 1),
         lambda: ms.nn.map_reduce_keep_high_dim(g, gpu_from(a), 1), ShapeError),
    ]
    for cpu_call, gpu_call, typ in cases:
        both_raise(cpu_call, gpu_call, [g], [d0], typ)
    with pytest.raises(DeviceError):
        ms.nn.map_reduce_keep_lowest(g, cpu_of(a))
    assert same_bytes(g, d0)


# ---- convolution ---------------------------------------------------------------------------
def _conv_ref(x, w, pad, stride):
    """numpy's float64 convolution (zero padding (py, px), stride)."""
    N, C, H, W = x.shape
    K, _, kh, kw = w.shape
    py, px = (pad, pad) if isinstance(pad, int) else pad
    xp = np.zeros((N, C, H + 2 * py, W + 2 * px))
    xp[:, :, py:py + H, px:px + W] = x
    oh, ow = (H + 2 * py - kh) // stride + 1, (W + 2 * px - kw) // stride + 1
    y = np.zeros((N, K, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            y += np.einsum("nchw,kc->nkhw", patch, w[:, :, i, j].astype(np.float64))
    return y


def _conv_grad_weight_ref(x, g, wshape, pad, stride):
    N, C, H, W = x.shape
    K, _, kh, kw = wshape
    py, px = (pad, pad) if isinstance(pad, int) else pad
    xp = np.zeros((N, C, H + 2 * py, W + 2 * px))
    xp[:, :, py:py + H, px:px + W] = x
    oh, ow = g.shape[2:]
    dw = np.zeros(wshape)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            dw[:, :, i, j] = np.einsum("nchw,nkhw->kc", patch, g.astype(np.float64))
    return dw


def _conv_grad_data_ref(g, w, xshape, pad, stride):
    N, C, H, W = xshape
    K, _, kh, kw = w.shape
    py, px = (pad, pad) if isinstance(pad, int) else pad
    dxp = np.zeros((N, C, H + 2 * py, W + 2 * px))
    oh, ow = g.shape[2:]
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride] += \
                np.einsum("nkhw,kc->nchw", g.astype(np.float64), w[:, :, i, j].astype(np.float64))
    return dxp[:, :, py:py + H, px:px + W]


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


SAVERS = [("saveto", 0, 1), ("plusto", 1, 1), ("minusto", 1, -1)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", [
    ((2, 3, 5, 70), (4, 3, 3, 3), (1, 2), 2),       # pitched data rows of 70
    ((1, 1, 1, 65), (2, 1, 1, 65), 0, 1),           # one output column, a 65-wide kernel
    ((3, 2, 4, 4), (1, 2, 4, 4), 3, 3),             # pad of the kernel's size, stride 3
    ((1, 2, 6, 1), (3, 2, 2, 1), (0, 2), 1),        # one column
])
def test_conv2d_family_of_odd_shapes_savers_and_an_expression(case, dtype):
    xs, ws, pad, stride = case
    rng = np.random.default_rng(61)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    ref = _conv_ref(x * 2 - 1, w, pad, stride)
    g = rng.standard_normal(ref.shape).astype(dtype)
    ref_w = _conv_grad_weight_ref(x * 2 - 1, g, ws, pad, stride)
    ref_x = _conv_grad_data_ref(g, w, xs, pad, stride)
    for saver, beta, sign in SAVERS:
        y0 = rng.standard_normal(ref.shape).astype(dtype)
        yc = cpu_of(y0)
        ms.nn.conv2d(yc, cpu_of(x) * 2 - 1, cpu_of(w), pad, stride, saver)
        yg = gpu_from(y0, pad=False)
        ms.nn.conv2d(yg, gpu_from(x) * 2 - 1, gpu_from(w, pad=False), pad, stride, saver)
        np.testing.assert_allclose(yg.to_numpy(), yc.numpy(), **_tol(dtype))
        np.testing.assert_allclose(yg.to_numpy(), beta * y0 + sign * ref, **_tol(dtype))
        w0 = rng.standard_normal(ws).astype(dtype)
        dwc = cpu_of(w0)
        ms.nn.conv2d_grad_weight(dwc, cpu_of(x) * 2 - 1, cpu_of(g), pad, stride, saver)
        dwg = gpu_from(w0, pad=False)
        ms.nn.conv2d_grad_weight(dwg, gpu_from(x) * 2 - 1, gpu_from(g, pad=False), pad, stride,
                                 saver)
        np.testing.assert_allclose(dwg.to_numpy(), dwc.numpy(), **_tol(dtype))
        np.testing.assert_allclose(dwg.to_numpy(), beta * w0 + sign * ref_w, **_tol(dtype))
        x0 = rng.standard_normal(xs).astype(dtype)
        dxc = cpu_of(x0)
        ms.nn.conv2d_grad_data(dxc, cpu_of(g), cpu_of(w), pad, stride, saver)
        dxg = gpu_from(x0)
        ms.nn.conv2d_grad_data(dxg, gpu_from(g, pad=False), gpu_from(w, pad=False), pad, stride,
                               saver)
        np.testing.assert_allclose(dxg.to_numpy(), dxc.numpy(), **_tol(dtype))
        np.testing.assert_allclose(dxg.to_numpy(), beta * x0 + sign * ref_x, **_tol(dtype))


@pytest.mark.parametrize("column_bytes", [None, 1])
def test_conv2d_into_images_shifted_over_its_data(monkeypatch, column_bytes):
    """A 1x1 convolution with K == C: out = images 1..3 and data = images 0..2 of one gpu
    allocation (image n of out is image n + 1 of data), out == data, data an expression of
    out, and a weight that is a slice of the same allocation as out; the values of the
    sources before the call. column_bytes 1: a chunk an image (conv.COLUMN_BYTES)."""
    from mshadow.cuda import conv
    if column_bytes is not None:
        monkeypatch.setattr(conv, "COLUMN_BYTES", column_bytes)
    rng = np.random.default_rng(62)
    base = rng.standard_normal((4, 3, 2, 5))
    w = rng.standard_normal((3, 3, 1, 1))
    for saver, beta, sign in SAVERS:
        want = base.copy()
        want[1:] = beta * base[1:] + sign * _conv_ref(base[:3], w, 0, 1)
        c = cpu_of(base)
        ms.nn.conv2d(c.slice(1, 4), c.slice(0, 3), cpu_of(w), 0, 1, saver)
        t = gpu_from(base, pad=False)
        ms.nn.conv2d(t.slice(1, 4), t.slice(0, 3), gpu_from(w, pad=False), 0, 1, saver)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(t.to_numpy(), c.numpy(), rtol=1e-12, atol=1e-12)
        # out == data
        t = gpu_from(base, pad=False)
        ms.nn.conv2d(t, t, gpu_from(w, pad=False), 0, 1, saver)
        np.testing.assert_allclose(t.to_numpy(), beta * base + sign * _conv_ref(base, w, 0, 1),
                                   rtol=1e-12, atol=1e-12)
        # data an expression of the shifted images of out
        want = base.copy()
        want[1:] = beta * base[1:] + sign * _conv_ref(base[:3] * 2 - 1, w, 0, 1)
        c = cpu_of(base)
        ms.nn.conv2d(c.slice(1, 4), c.slice(0, 3) * 2 - 1, cpu_of(w), 0, 1, saver)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-12, atol=1e-12)
        t = gpu_from(base, pad=False)
        ms.nn.conv2d(t.slice(1, 4), t.slice(0, 3) * 2 - 1, gpu_from(w, pad=False), 0, 1, saver)
        np.testing.assert_allclose(t.to_numpy(), want, rtol=1e-12, atol=1e-12)
    # the weight (3, 3, 1, 1) is the first 9 elements of a dense allocation whose tail is out
    flat = gpu_from(np.concatenate([w.reshape(-1), np.zeros(2 * 3 * 2 * 5)]), pad=False)
    wv = ms.from_dlpack(_Producer(_crafted(flat, shape=(3, 3, 1, 1), dtype=(2, 64, 1))))
    x = rng.standard_normal((2, 3, 2, 5))
    out = ms.from_dlpack(_Producer(_crafted(flat, shape=(2, 3, 2, 5), dtype=(2, 64, 1))))
    # out starts at the weight: writing out overwrites the weight it multiplies
    ms.nn.conv2d(out, gpu_from(x), wv, 0, 1)
    np.testing.assert_allclose(out.to_numpy(), _conv_ref(x, w, 0, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("column_bytes", [None, 1])
def test_conv2d_grad_weight_into_images_of_its_own_data(monkeypatch, column_bytes):
    """dweight (K, C, H, W) = images 1..2 of the allocation whose images 0..2 are the data
    (a kernel of the image's size: a 1x1 output), the data a tensor and an expression."""
    from mshadow.cuda import conv
    if column_bytes is not None:
        monkeypatch.setattr(conv, "COLUMN_BYTES", column_bytes)
    rng = np.random.default_rng(63)
    base = rng.standard_normal((3, 2, 3, 4))
    g = rng.standard_normal((3, 2, 1, 1))
    for saver, beta, sign in SAVERS:
        want = base.copy()
        want[1:] = beta * base[1:] + sign * _conv_grad_weight_ref(base, g, (2, 2, 3, 4), 0, 1)
        c = cpu_of(base)
        ms.nn.conv2d_grad_weight(c.slice(1, 3), c, cpu_of(g), 0, 1, saver)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-12, atol=1e-12)
        t = gpu_from(base, pad=False)
        ms.nn.conv2d_grad_weight(t.slice(1, 3), t, gpu_from(g, pad=False), 0, 1, saver)
        np.testing.assert_allclose(t.to_numpy(), want, rtol=1e-12, atol=1e-12)
        want[1:] = beta * base[1:] + sign * _conv_grad_weight_ref(base * 0.5, g, (2, 2, 3, 4),
                                                                  0, 1)
        t = gpu_from(base, pad=False)
        ms.nn.conv2d_grad_weight(t.slice(1, 3), t * 0.5, gpu_from(g, pad=False), 0, 1, saver)
        np.testing.assert_allclose(t.to_numpy(), want, rtol=1e-12, atol=1e-12)
        c = cpu_of(base)
        ms.nn.conv2d_grad_weight(c.slice(1, 3), c * 0.5, cpu_of(g), 0, 1, saver)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-12, atol=1e-12)


def test_conv2d_of_a_padded_expression_as_data():
    """data = pad(x, 1) (an extension expression, itself padded again by the call)."""
    rng = np.random.default_rng(67)
    x = rng.standard_normal((2, 2, 4, 66)).astype(np.float64)
    w = rng.standard_normal((3, 2, 3, 2)).astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = _conv_ref(xp, w, (1, 0), 2)
    yc = cpu_of(np.zeros(ref.shape))
    ms.nn.conv2d(yc, ms.pad(cpu_of(x), 1), cpu_of(w), (1, 0), 2)
    yg = ms.new_tensor(ref.shape, np.nan, dtype=np.float64, device=ms.gpu)
    ms.nn.conv2d(yg, ms.pad(gpu_from(x), 1), gpu_from(w, pad=False), (1, 0), 2)
    np.testing.assert_allclose(yc.numpy(), ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(yg.to_numpy(), ref, rtol=1e-10, atol=1e-10)
    g = rng.standard_normal(ref.shape)
    dwc, dwg = cpu_of(np.zeros(w.shape)), gpu_from(np.zeros(w.shape), pad=False)
    ms.nn.conv2d_grad_weight(dwc, ms.pad(cpu_of(x), 1), cpu_of(g), (1, 0), 2)
    ms.nn.conv2d_grad_weight(dwg, ms.pad(gpu_from(x), 1), gpu_from(g, pad=False), (1, 0), 2)
    want = _conv_grad_weight_ref(xp, g, w.shape, (1, 0), 2)
    np.testing.assert_allclose(dwc.numpy(), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dwg.to_numpy(), want, rtol=1e-10, atol=1e-10)


def test_conv2d_on_a_stream():
    s = ms.new_stream(ms.gpu)
    try:
        rng = np.random.default_rng(64)
        x = rng.standard_normal((3, 2, 5, 66)).astype(np.float32)
        w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
        ref = _conv_ref(x, w, 1, 1)
        xg = ms.new_tensor(x.shape, None, device=ms.gpu, pad=True, stream=s)
        ms.copy(xg, cpu_of(x), s)
        wg = ms.new_tensor(w.shape, None, device=ms.gpu, stream=s)
        ms.copy(wg, cpu_of(w), s)
        yg = ms.new_tensor(ref.shape, 1.0, device=ms.gpu, stream=s)
        ms.nn.conv2d(yg, xg, wg, 1, 1, "minusto")
        gg = ms.new_tensor(ref.shape, 0.5, device=ms.gpu, stream=s)
        dw = ms.new_tensor(w.shape, 0.0, device=ms.gpu, stream=s)
        ms.nn.conv2d_grad_weight(dw, xg, gg, 1, 1, "plusto")
        dx = ms.new_tensor(x.shape, 0.0, device=ms.gpu, pad=True, stream=s)
        ms.nn.conv2d_grad_data(dx, gg, wg, 1, 1)
        s.wait()
        np.testing.assert_allclose(yg.to_numpy(), 1 - ref, rtol=2e-4, atol=2e-4)
        np.testing.assert_allclose(dw.to_numpy(), _conv_grad_weight_ref(
            x, np.full(ref.shape, 0.5), w.shape, 1, 1), rtol=2e-4, atol=2e-3)
        np.testing.assert_allclose(dx.to_numpy(), _conv_grad_data_ref(
            np.full(ref.shape, 0.5), w, x.shape, 1, 1), rtol=2e-4, atol=2e-4)
    finally:
        ms.delete_stream(s)


def _conv_family_both_ways(which, x, w, g, saver):
    """``which`` of the conv2d family (pad 0, stride 1; data x, weight w, output gradient g)
    into a destination of 3s on the CPU and on the GPU: (cpu dst, gpu dst)."""
    d0 = np.full({"conv2d": g.shape, "grad_weight": w.shape, "grad_data": x.shape}[which], 3,
                 np.float32)
    c, dg = cpu_of(d0), gpu_from(d0, pad=which == "grad_data")
    if which == "conv2d":
        ms.nn.conv2d(c, cpu_of(x), cpu_of(w), 0, 1, saver)
        ms.nn.conv2d(dg, gpu_from(x), gpu_from(w, pad=False), 0, 1, saver)
    elif which == "grad_weight":
        ms.nn.conv2d_grad_weight(c, cpu_of(x), cpu_of(g), 0, 1, saver)
        ms.nn.conv2d_grad_weight(dg, gpu_from(x), gpu_from(g, pad=False), 0, 1, saver)
    else:
        ms.nn.conv2d_grad_data(c, cpu_of(g), cpu_of(w), 0, 1, saver)
        ms.nn.conv2d_grad_data(dg, gpu_from(g, pad=False), gpu_from(w, pad=False), 0, 1, saver)
    return c, dg


@pytest.mark.parametrize("which", ["conv2d", "grad_weight", "grad_data"])
@pytest.mark.parametrize("empty", ["N", "K"])
def test_conv2d_family_of_empty_batches_and_filters(which, empty):
    """No images or no filters: the GPU gives what the CPU gives (saveto: zeros where there
    are elements)."""
    N, C, K = (0, 2, 3) if empty == "N" else (2, 2, 0)
    rng = np.random.default_rng(65)
    x = rng.standard_normal((N, C, 4, 4)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    g = rng.standard_normal((N, K, 2, 2)).astype(np.float32)
    for saver in ("saveto", "plusto", "minusto"):
        c, dg = _conv_family_both_ways(which, x, w, g, saver)
        assert same_bytes(dg, c), saver
        if c.numpy().size:
            assert (c.numpy() == (0 if saver == "saveto" else 3)).all()


@pytest.mark.parametrize("which", ["conv2d", "grad_weight", "grad_data"])
def test_conv2d_family_of_zero_channels(which):
    # regression: cuBLAS was called with a leading dimension C*kh*kw = 0 (CudaError)
    x = np.ones((2, 0, 4, 4), np.float32)
    w = np.ones((3, 0, 3, 3), np.float32)
    g = np.ones((2, 3, 2, 2), np.float32)
    for saver in ("saveto", "plusto"):
        c, dg = _conv_family_both_ways(which, x, w, g, saver)
        assert same_bytes(dg, c), saver


def test_conv2d_errors_store_nothing():
    rng = np.random.default_rng(66)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y0 = np.full((2, 4, 3, 3), 7, np.float32)
    g = gpu_from(y0, pad=False)
    G, C = gpu_from, cpu_of
    cases = [
        (lambda: ms.nn.conv2d(C(y0), C(x), C(w[:, :2])),
         lambda: ms.nn.conv2d(g, G(x), G(w[:, :2], pad=False)), ShapeError),
        (lambda: ms.nn.conv2d(C(y0), C(x), C(w), 1),
         lambda: ms.nn.conv2d(g, G(x), G(w, pad=False), 1), ShapeError),
        (lambda: ms.nn.conv2d(C(y0), C(x.astype(np.float64)), C(w)),
         lambda: ms.nn.conv2d(g, G(x.astype(np.float64)), G(w, pad=False)), DTypeError),
        (lambda: ms.nn.conv2d(C(y0), C(x), C(w), 0, 1, "multo"),
         lambda: ms.nn.conv2d(g, G(x), G(w, pad=False), 0, 1, "multo"), TypeError),
        (lambda: ms.nn.conv2d(readonly_cpu(y0), C(x), C(w)),
         lambda: ms.nn.conv2d(readonly_gpu(y0)[0], G(x), G(w, pad=False)), ValueError),
        (lambda: ms.nn.conv2d(C(y0), freed_cpu(x), C(w)),
         lambda: ms.nn.conv2d(g, freed_gpu(x), G(w, pad=False)), FreedTensorError),
        (lambda: ms.nn.conv2d(C(y0), C(x), freed_cpu(w)),
         lambda: ms.nn.conv2d(g, G(x), freed_gpu(w, pad=False)), FreedTensorError),
        (lambda: ms.nn.conv2d(C(y0), C(x) * 1, freed_cpu(w)),
         lambda: ms.nn.conv2d(g, G(x) * 1, freed_gpu(w, pad=False)), FreedTensorError),
        (lambda: ms.nn.conv2d_grad_weight(C(w), C(x), C(y0[:1])),
         lambda: ms.nn.conv2d_grad_weight(G(w, pad=False), G(x), G(y0[:1], pad=False)),
         ShapeError),
        (lambda: ms.nn.conv2d_grad_data(C(x), C(y0), C(w), 0, 2),
         lambda: ms.nn.conv2d_grad_data(G(x), G(y0, pad=False), G(w, pad=False), 0, 2),
         ShapeError),
    ]
    for cpu_call, gpu_call, typ in cases:
        both_raise(cpu_call, gpu_call, [g], [y0], typ)
    for dtype in (np.float16, np.int32, np.int8):
        # the CPU convolves these; the GPU documents float32 / float64 only (cuBLAS's S and
        # D): a DTypeError storing nothing
        a, b, o = x.astype(dtype), w.astype(dtype), y0.astype(dtype)
        ms.nn.conv2d(C(o), C(a), C(b))
        for f, args in [(ms.nn.conv2d, (G(a), G(b, pad=False))),
                        (ms.nn.conv2d_grad_data, None), (ms.nn.conv2d_grad_weight, None)]:
            go = gpu_from(o, pad=False)
            if f is ms.nn.conv2d:
                with pytest.raises(DTypeError):
                    f(go, *args)
                assert same_bytes(go, o)
            elif f is ms.nn.conv2d_grad_data:
                gx = gpu_from(a)
                with pytest.raises(DTypeError):
                    f(gx, go, G(b, pad=False))
                assert same_bytes(gx, a)
            else:
                gw = gpu_from(b, pad=False)
                with pytest.raises(DTypeError):
                    f(gw, G(a), go)
                assert same_bytes(gw, b)
    # a pitched (non-dense) destination or weight: a ShapeError on the GPU too
    yp = ms.new_tensor((2, 4, 3, 70), 7.0, device=ms.gpu, pad=True)
    assert yp.stride > 70
    with pytest.raises(ShapeError):
        ms.nn.conv2d(yp, G(np.ones((2, 3, 5, 72), np.float32)), G(w, pad=False))
    assert (yp.to_numpy() == 7).all()
    # a pitched grad (rows of 70: 72 on the CPU, 128 on the GPU): a ShapeError on both
    gp0 = np.ones((2, 4, 1, 70), np.float32)
    gc = ms.new_tensor(gp0.shape, 1.0, pad=True)
    gg = ms.new_tensor(gp0.shape, 1.0, device=ms.gpu, pad=True)
    assert not gc.check_contiguous() and not gg.check_contiguous()
    xw = np.ones((2, 3, 3, 72), np.float32)
    dw0 = np.full((4, 3, 3, 3), 5, np.float32)
    dwg = gpu_from(dw0, pad=False)
    both_raise(lambda: ms.nn.conv2d_grad_weight(C(dw0), C(xw), gc),
               lambda: ms.nn.conv2d_grad_weight(dwg, G(xw), gg), [dwg], [dw0], ShapeError)
    dxg = gpu_from(xw)
    both_raise(lambda: ms.nn.conv2d_grad_data(C(xw), gc, C(w)),
               lambda: ms.nn.conv2d_grad_data(dxg, gg, G(w, pad=False)), [dxg], [xw], ShapeError)
    both_raise(lambda: ms.nn.conv2d(C(y0), C(x), C(w) * 1),
               lambda: ms.nn.conv2d(g, G(x), G(w, pad=False) * 1), [g], [y0], TypeError)
    for args in [(g, C(x), G(w, pad=False)), (g, G(x), C(w)), (g, G(x) * 1 + C(x), G(w))]:
        with pytest.raises(DeviceError):
            ms.nn.conv2d(*args)
        assert same_bytes(g, y0)
    # grad overlapping dweight / dx overlapping grad: the CPU's ValueError
    t = gpu_from(np.ones((4, 3, 3, 3), np.float32), pad=False)
    with pytest.raises(ValueError):
        ms.nn.conv2d_grad_data(t.slice(0, 2), t.slice(1, 3), G(np.ones((3, 3, 1, 1),
                                                                        np.float32), pad=False))
    assert (t.to_numpy() == 1).all()


# ---- gathers whose index is an expression (the executor's staging) -------------------------
def test_gathers_with_an_index_expression_of_fractions():
    rng = np.random.default_rng(71)
    src = rng.standard_normal((5, 70)).astype(np.float32)
    idx = np.array([0.5, 3.9, 2.0, 4.2, 1.999, 0], np.float32)
    exprs = [lambda t: t * 1, lambda t: t + 0.25, lambda t: (t + 10) - 10, lambda t: t * 0.5 * 2]
    for mk in exprs:
        c = ms.new_tensor((6, 70), 7.0)
        c[:] = ms.take(mk(cpu_of(idx)), cpu_of(src))
        g = ms.new_tensor((6, 70), 7.0, device=ms.gpu, pad=True)
        g[:] = ms.take(mk(gpu_from(idx)), gpu_from(src))
        assert same_bytes(g, c)
        c2 = ms.new_tensor((5,), 7.0)
        c2[:] = ms.mat_choose_row_element(cpu_of(src), mk(cpu_of(idx[:5]) * 10))
        g2 = ms.new_tensor((5,), 7.0, device=ms.gpu)
        g2[:] = ms.mat_choose_row_element(gpu_from(src), mk(gpu_from(idx[:5]) * 10))
        assert same_bytes(g2, c2)
        c3 = ms.new_tensor((6, 5), 7.0)
        c3[:] = ms.one_hot_encode(mk(cpu_of(idx)), 5)
        g3 = ms.new_tensor((6, 5), 7.0, device=ms.gpu)
        g3[:] = ms.one_hot_encode(mk(gpu_from(idx)), 5)
        assert same_bytes(g3, c3)
        c4 = ms.new_tensor((5, 70), 7.0)
        c4 += ms.take_grad(mk(cpu_of(idx)), cpu_of(rng.standard_normal((6, 70)).astype(
            np.float32) * 0 + 1), 5)
        g4 = ms.new_tensor((5, 70), 7.0, device=ms.gpu, pad=True)
        g4 += ms.take_grad(mk(gpu_from(idx)), gpu_from(np.ones((6, 70), np.float32)), 5)
        assert same_bytes(g4, c4)


def test_gathers_whose_index_is_a_view_or_an_exotic_expression():
    rng = np.random.default_rng(72)
    src = rng.standard_normal((5, 70)).astype(np.float32)
    idx2d = np.array([[0.5, 3.9, 2.0], [4.2, 1.999, 0]], np.float32)
    flat = idx2d.reshape(6)
    forms = [
        lambda T: ms.reshape(T(idx2d), (6,)),
        lambda T: ms.reshape(T(idx2d) * 1, (6,)),
        lambda T: ms.reshape(T(idx2d.T.copy()).T, (6,)),
        lambda T: ms.flip(T(flat), 0),
        lambda T: ms.concat(T(idx2d[0].copy()), T(idx2d[1].copy()) + 0, 0),
        lambda T: ms.reshape(ms.broadcast_to(T(np.array([[1.5, 3.2, 0]], np.float32)), (2, 3)),
                             (6,)),
        lambda T: ms.where(T(flat) > 2, T(flat), T(flat) * 0 + 4.5),
        lambda T: ms.mat_choose_row_element(T(np.tile(flat, (6, 1))), T(np.arange(6.0,
                                                                            dtype=np.float32))),
    ]
    for i, form in enumerate(forms):
        c = ms.new_tensor((6, 70), 3.0)
        c[:] = 2 * c + ms.take(form(cpu_of), cpu_of(src)) * 0.5
        g = ms.new_tensor((6, 70), 3.0, device=ms.gpu, pad=True)
        g[:] = 2 * g + ms.take(form(gpu_from), gpu_from(src)) * 0.5
        assert same_bytes(g, c), i


def test_a_gather_whose_index_expression_reads_the_destination():
    """d[:] = choose_row(src, d * 1): the index is d's values before the store."""
    src = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    d0 = np.array([5, 0.5, 3.7, 2], np.float32)
    c = cpu_of(d0)
    c[:] = ms.mat_choose_row_element(cpu_of(src), c * 1)
    g = gpu_from(d0)
    g[:] = ms.mat_choose_row_element(gpu_from(src), g * 1)
    assert same_bytes(g, c)
    np.testing.assert_array_equal(c.numpy(), [5, 6, 15, 20])      # hand-computed
    g = gpu_from(d0)
    g[:] = ms.mat_choose_row_element(gpu_from(src), g)           # a plain leaf index = dst
    assert same_bytes(g, c)


def test_gathers_with_a_bad_index_expression_raise_and_store_nothing():
    src = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([0, 1, 2, 3], np.float32)
    d0 = np.full((4, 5), 7, np.float32)
    g = gpu_from(d0)
    for mk in [lambda t: t + 1, lambda t: t - 1, lambda t: t * np.inf, lambda t: t - t / 0]:
        def cpu_call():
            c = cpu_of(d0)
            c[:] = ms.take(mk(cpu_of(idx)), cpu_of(src))

        def gpu_call():
            g[:] = ms.take(mk(gpu_from(idx)), gpu_from(src))
        ct, _ = outcome(cpu_call)
        if ct == "ok":                  # the CPU took it: the GPU must give the same bytes
            c = cpu_of(d0)
            c[:] = ms.take(mk(cpu_of(idx)), cpu_of(src))
            gg = gpu_from(d0)
            gg[:] = ms.take(mk(gpu_from(idx)), gpu_from(src))
            assert same_bytes(gg, c)
            continue
        both_raise(cpu_call, gpu_call, [g], [d0])


# ---- Random(ms.gpu).get_rand_int -----------------------------------------------------------
_M32 = 0xFFFFFFFF


def _philox(ctr, key):
    """Philox4x32-10 of one counter (Random123's), in Python integers."""
    c, (k0, k1) = list(ctr), key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & _M32, p1 & _M32, ((p0 >> 32) ^ c[3] ^ k1) & _M32,
             p0 & _M32]
        k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
    return c


def _words(n, seed, first_counter):
    """n raw words of the stream keyed by ``seed`` from ``first_counter``, 4 a counter."""
    out = []
    ctr = first_counter
    while len(out) < n:
        out += _philox([ctr & _M32, ctr >> 32, 0, 0], (seed & _M32, seed >> 32))
        ctr += 1
    return np.array(out[:n], dtype=np.uint64)


def test_philox_oracle_matches_random123s_known_answers():
    assert _philox([0, 0, 0, 0], (0, 0)) == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    assert _philox([_M32] * 4, (_M32, _M32)) == [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
    assert _philox([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], (0xa4093822, 0x299f31d0)) \
        == [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]


def test_get_rand_int_is_the_philox_stream_in_logical_order_and_errors_keep_the_counter():
    seed = (7 << 32) | 12345           # the Random keeps the seed's low 32 bits, as the CPU's
    r = ms.Random(ms.gpu, seed)
    assert r.get_seed() == 12345
    a = ms.new_tensor((3, 65), device=ms.gpu, dtype=np.int32, pad=True)
    assert a.stride > 65
    r.get_rand_int(a)
    np.testing.assert_array_equal(a.to_numpy(), _words(195, 12345, 0).astype(np.uint32).view(
        np.int32).reshape(3, 65))
    used = -(-195 // 4)
    # errors: a float tensor, a cpu tensor, a read-only tensor, a freed tensor; none
    # advances the stream
    ro, _ = readonly_gpu(np.zeros((2, 2), np.int64))
    for bad, typ in [(ms.new_tensor((3,), device=ms.gpu), DTypeError),
                     (ms.new_tensor((3,), dtype=np.int64), DeviceError),
                     (ro, ValueError), (freed_gpu(np.zeros(3, np.int64)), FreedTensorError),
                     (np.zeros(3, np.int64), TypeError)]:
        with pytest.raises(typ):
            r.get_rand_int(bad)
    assert (ro.to_numpy() == 0).all()
    st = ms.new_stream(ms.gpu)
    r.set_stream(st)
    ms.delete_stream(st)
    z = gpu_from(np.zeros(5, np.int64))
    with pytest.raises(DeviceError):            # work on a deleted stream: nothing queued
        r.get_rand_int(z)
    assert (z.to_numpy() == 0).all()
    r.set_stream(None)
    b = ms.new_tensor((1, 1), device=ms.gpu, dtype=np.int64)
    r.get_rand_int(b)
    assert int(b.to_numpy()[0, 0]) == int(_words(1, 12345, used)[0])
    e = ms.new_tensor((0, 3), device=ms.gpu, dtype=np.int64)
    r.get_rand_int(e)                   # uses no counter
    used += 1                           # b's one element took a counter
    p = ms.new_tensor((4, 70), -1, device=ms.gpu, dtype=np.int64, pad=True)
    r.get_rand_int(p[1:3])              # a view of pitched rows: only its rows, in order
    got = p.to_numpy()
    np.testing.assert_array_equal(got[1:3].reshape(-1), _words(140, 12345, used).astype(
        np.int64))
    assert (got[0] == -1).all() and (got[3] == -1).all()
    used += 140 // 4
    c = ms.new_tensor((9,), device=ms.gpu, dtype=np.int64)
    r.get_rand_int(c)
    np.testing.assert_array_equal(c.to_numpy(), _words(9, 12345, used).astype(np.int64))
    r.seed(12345)
    d = ms.new_tensor((195,), device=ms.gpu, dtype=np.int64)
    r.get_rand_int(d)
    np.testing.assert_array_equal(d.to_numpy().astype(np.uint32).view(np.int32),
                                  a.to_numpy().reshape(-1))
