"""A reduction's node, built compiled (_reduce.pxi reduce_node / make_reduce) and interned by
its site, and a small statement run with no array (_reduce_small) against the route that
makes arrays (run_recipe, finish_values, store_array), reduce.py's checks and numpy."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import _core, ir
from mshadow.errors import ShapeError
from mshadow.extension import reduce as red_mod


def _tensor(a, pad=False):
    t = ms.new_tensor(a.shape, dtype=a.dtype, pad=pad)
    t.numpy()[...] = a
    return t


# ---- the node --------------------------------------------------------------------------
BUILDERS = [
    ("sum_rows", lambda s: ms.sum_rows(s), "except_dim", 1, "sum_rows"),
    ("sumall_except_dim 0", lambda s: ms.sumall_except_dim(s, 0), "except_dim", 0,
     "sumall_except_dim<0>"),
    ("reduce_except_dim max", lambda s: ms.reduce_except_dim(s, 1, ms.red.maximum),
     "except_dim", 1, "reduce_except_dim<1, red::maximum>"),
    ("reduce_with_axis 0", lambda s: ms.reduce_with_axis(s, 0, ms.red.sum), "with_axis", 0,
     "reduce_with_axis<red::sum, false>"),
    ("reduce_keepdim 1 min", lambda s: ms.reduce_keepdim(s, 1, ms.red.minimum), "keepdim", 1,
     "reduce_keepdim<red::minimum, false>"),
]


@pytest.mark.parametrize("name,build,form,axis,where", BUILDERS, ids=[b[0] for b in BUILDERS])
@pytest.mark.parametrize("source", ["tensor", "expression", "container"])
def test_the_compiled_node_is_the_one_reduce_py_describes(name, build, form, axis, where, source):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = _tensor(a)
    src = {"tensor": x, "expression": x * 2.0,
           "container": ms.TensorContainer((3, 4), dtype=np.float64)}[source]
    e = build(src)
    assert type(e) is red_mod.ReduceExp and isinstance(e, _core.ReduceNode)
    reducer = e.reducer
    src_key = ir.LEAF["f64"] if source != "expression" else src.key
    assert e.key == ir.Reduce("f64", form, reducer.name, axis, False, src_key)
    want = {"except_dim": (a.shape[axis],), "with_axis": a.shape[:axis] + a.shape[axis + 1:],
            "keepdim": a.shape[:axis] + (1,) + a.shape[axis + 1:]}[form]
    assert e.shape == want and type(e.shape) is ms.Shape
    assert (e.code, e.form, e.axis, e.mask, e.where) == ("f64", form, axis, False, where)
    assert e.src is src and e.exp_type == 7
    assert e.leaves == ((src,) if source != "expression" else src.leaves)
    assert e.scale == 1.0 and type(e.scale) is float and e.scalars == (1.0,)
    s = e * 3
    assert type(s) is red_mod.ReduceExp and s.scale == 3.0 and s.key == e.key
    assert s.where == where and s.src is src


def test_an_integer_node_has_an_integer_scale():
    x = ms.new_tensor((3, 4), dtype=np.int32)
    e = ms.sum_rows(x)
    assert e.scale == 1 and type(e.scale) is int and e.scalars == (1,)


def test_a_structure_built_again_gets_the_same_node_and_shape():
    x = ms.new_tensor((5, 6))
    a, b = ms.sum_rows(x), ms.sum_rows(x)
    assert a is not b and a.key is b.key and a.shape is b.shape
    c, d = ms.sumall_except_dim(x * 2, 0), ms.sumall_except_dim(x * 2, 0)
    assert c.key is d.key
    # another source shape, axis, reducer or dtype: another node, each right
    y = ms.new_tensor((5, 7))
    assert ms.sum_rows(y).shape == (7,) and ms.sum_rows(x).shape == (6,)
    assert ms.sumall_except_dim(x, 0).shape == (5,)
    m = ms.reduce_except_dim(x, 1, ms.red.maximum)
    assert m.key[3] == "maximum" and m.key is not a.key
    z = ms.new_tensor((5, 6), dtype=np.float64)
    assert ms.sum_rows(z).key[1] == "f64" and ms.sum_rows(z).key[6] == ir.LEAF["f64"]


def test_reduce_node_leaves_everything_else_to_reduce_py():
    x = ms.new_tensor((3, 4))
    node = _core.reduce_node
    assert node(x, "except_dim", ms.red.sum, 1, "w") is not None
    assert node(x.numpy(), "except_dim", ms.red.sum, 1, "w") is None      # an array
    assert node(3.0, "except_dim", ms.red.sum, 0, "w") is None
    assert node(x, "except_dim", ms.red.sum, -1, "w") is None             # negative axis
    assert node(x, "except_dim", ms.red.sum, 2, "w") is None              # out of range
    assert node(x, "except_dim", ms.red.sum, True, "w") is None           # a bool
    assert node(x, "except_dim", ms.red.sum, np.int64(1), "w") is None    # not an int
    assert node(x, "except_dim", "sum", 1, "w") is None                   # not a reducer
    assert node(x, "except_dim", ms.red.sum, 1, "w", 3) is None           # not 3-D
    assert node(x, "other", ms.red.sum, 1, "w") is None
    assert node(ms.new_tensor((4,)), "with_axis", ms.red.sum, 0, "w") is None   # to 0-D
    assert node(ms.new_tensor((0, 4)), "except_dim", ms.red.sum, 1, "w") is None  # no row
    assert node(ms.new_tensor((0, 4)), "except_dim", ms.red.sum, 0, "w") is not None


def test_reduce_py_still_normalises_and_refuses():
    x = _tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = ms.new_tensor((3,))
    y[:] = ms.reduce_with_axis(x, -1, ms.red.sum)                  # negative: reduce.py
    np.testing.assert_array_equal(y.numpy(), [6, 22, 38])
    y[:] = ms.sumall_except_dim(x.numpy(), 0)                       # an array: reduce.py
    np.testing.assert_array_equal(y.numpy(), [6, 22, 38])
    with pytest.raises(TypeError, match="reducer must be"):
        ms.reduce_with_axis(x, 0, "sum")
    with pytest.raises(ShapeError, match="expects a 2-D expression"):
        ms.sum_rows(ms.new_tensor((2, 3, 4)))
    with pytest.raises(ShapeError, match="can not reduce over empty tensor"):
        ms.sum_rows(ms.new_tensor((0, 4)))
    with pytest.raises(ShapeError, match="0-D result"):
        ms.reduce_with_axis(ms.new_tensor((4,)), 0, ms.red.sum)
    with pytest.raises(ShapeError, match="out of bound"):
        ms.reduce_with_axis(x, 2, ms.red.sum)
    with pytest.raises(TypeError, match="dimkeep must be an integer"):
        ms.sumall_except_dim(x, 1.0)


def test_install_reduce_path_takes_only_reduce_nodes():
    with pytest.raises(TypeError, match="not a ReduceNode"):
        _core.install_reduce_path(red_mod.fast_recipe, red_mod.row_kernel, red_mod.SAVERS, ir.LEAF,
                                  object, [])


# ---- the small statement, with no array ---------------------------------------------------
def _route_of_arrays(exp, dst):
    """The statement by the route that makes arrays: run_recipe, finish_values, store_array."""
    rc = red_mod.fast_recipe(exp)
    src = exp.src
    leaves = (src,) if isinstance(src, ms.Tensor) else src.leaves
    scalars = () if isinstance(src, ms.Tensor) else src.scalars
    if rc.merged:
        leaves = tuple(ms.from_numpy(t.numpy().reshape(tuple(rc.shape))) for t in leaves)
    values = _core.run_recipe(rc, leaves, scalars)
    res = _core.finish_values(values, rc.cdt, exp.scale, rc.dtype)
    assert _core.store_array(dst, np.ascontiguousarray(res).reshape(tuple(dst.shape)))


SMALL = [
    ("sum_rows 4x16", (4, 16), lambda x: ms.sum_rows(x)),
    ("sum_rows 64x64", (64, 64), lambda x: ms.sum_rows(x)),
    ("sum_rows of 200 rows (4 groups)", (200, 9), lambda x: ms.sum_rows(x * 2)),
    ("sum_rows 1x1", (1, 1), lambda x: ms.sum_rows(x)),
    ("keep 1 of 2x8x4x4", (2, 8, 4, 4), lambda x: ms.sumall_except_dim(x, 1)),
    ("keep 1 of 8x16x7x7", (8, 16, 7, 7), lambda x: ms.sumall_except_dim(x, 1)),
    ("keep 1 of 3x19x5 (8 + 8 + 3 sums)", (3, 19, 5), lambda x: ms.sumall_except_dim(x, 1)),
    ("keep the last of 3x4x130", (3, 4, 130), lambda x: ms.sumall_except_dim(x * 1, 2)),
    ("keep 0, by rows", (6, 3, 5), lambda x: ms.sumall_except_dim(x * 1, 0)),
    ("with_axis last", (6, 20), lambda x: ms.reduce_with_axis(x * 3, 1, ms.red.sum)),
    ("keepdim 1", (4, 5, 6), lambda x: ms.reduce_keepdim(x * 1, 1, ms.red.sum)),
    ("scaled", (9, 12), lambda x: ms.sum_rows(x * x) * -0.5),
    ("past the stack's 16 KiB", (3, 2048), lambda x: ms.sum_rows(x * 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("name,shape,build", SMALL, ids=[c[0] for c in SMALL])
def test_a_small_statement_gives_the_bits_of_the_route_of_arrays(name, shape, build, dtype):
    rng = np.random.default_rng(11)
    a = (rng.standard_normal(shape) * 4).astype(dtype)
    flat = a.reshape(-1)
    if flat.size > 6:
        flat[[1, 4]] = [np.inf, -0.0]
    x = _tensor(a)
    exp = build(x)
    if red_mod.fast_recipe(exp) is None:
        pytest.skip("reduce.py's route (no recipe)")
    for pad in (False, True):
        fast = ms.new_tensor(tuple(exp.shape), dtype=dtype, pad=pad, init=7)
        slow = ms.new_tensor(tuple(exp.shape), dtype=dtype, pad=pad, init=7)
        fast[:] = exp
        _route_of_arrays(exp, slow)
        np.testing.assert_array_equal(fast.numpy(), slow.numpy(), err_msg=f"{name} pad={pad}")


def test_the_kept_sums_go_in_order_eight_side_by_side():
    """sumall_except_dim(x, 1) of a (2, K, Q) tensor: the two rows added in float32 (from 0),
    then each k's Q values added in order in float64 (docs/reduce_nn.md), for K on both sides
    of the eight sums that go side by side."""
    rng = np.random.default_rng(5)
    for K in (1, 7, 8, 9, 16, 19):
        for Q in (1, 2, 5, 33):
            a = (rng.standard_normal((2, K, Q)) * 10 ** rng.uniform(-3, 3, (2, K, Q))
                 ).astype(np.float32)
            y = ms.new_tensor((K,))
            y[:] = ms.sumall_except_dim(_tensor(a), 1)
            rows = (np.float32(0) + a[0]) + a[1]           # float32, in row order
            want = np.empty(K, np.float64)
            for k in range(K):
                s = np.float64(rows[k, 0])
                for q in range(1, Q):
                    s = s + np.float64(rows[k, q])
                want[k] = s
            np.testing.assert_array_equal(y.numpy(), want.astype(np.float32),
                                          err_msg=f"K={K} Q={Q}")


def test_a_small_statement_reads_its_destination_before_it_stores():
    a = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    x = _tensor(a)
    row = x[0]                                 # the destination is the source's first row
    row[:] = ms.sum_rows(x)
    np.testing.assert_array_equal(x.numpy()[0], a.sum(0))
    np.testing.assert_array_equal(x.numpy()[1:], a[1:])


def test_a_small_statement_into_a_read_only_or_freed_destination_raises():
    x = _tensor(np.ones((4, 3), np.float32))
    y = ms.new_tensor((3,))
    ms.free_space(y)
    with pytest.raises(ms.FreedTensorError):
        y[:] = ms.sum_rows(x)
    arr = np.zeros(3, np.float32)
    arr.flags.writeable = False
    t = ms.from_numpy(arr)
    with pytest.raises(ValueError, match="read-only"):
        t[:] = ms.sum_rows(x)
    np.testing.assert_array_equal(arr, 0)


# ---- a tensor's rows, folded alone, from the statement path --------------------------------
ROWS = [
    ("with_axis last", (6, 20), lambda x, r: ms.reduce_with_axis(x, 1, r)),
    ("with_axis last of 3-D", (3, 5, 49), lambda x, r: ms.reduce_with_axis(x, 2, r)),
    ("keepdim last", (7, 16), lambda x, r: ms.reduce_keepdim(x, 1, r)),
    ("keep the first of 2-D", (9, 33), lambda x, r: ms.reduce_except_dim(x, 0, r)),
    ("scaled", (5, 17), lambda x, r: ms.reduce_with_axis(x, 1, r) * 0.3),
    ("negated", (5, 17), lambda x, r: -ms.reduce_with_axis(x, 1, r)),
    ("rows of a block", (3, 4096), lambda x, r: ms.reduce_with_axis(x, 1, r)),
    ("more rows than the stack holds", (5000, 3), lambda x, r: ms.reduce_with_axis(x, 1, r)),
]
REDUCERS = ("sum", "maximum", "minimum", "product")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64])
@pytest.mark.parametrize("reducer", REDUCERS)
@pytest.mark.parametrize("name,shape,build", ROWS, ids=[c[0] for c in ROWS])
def test_a_tensors_rows_give_reduce_pys_bits(name, shape, build, reducer, dtype):
    rng = np.random.default_rng(13)
    if np.dtype(dtype).kind == "f":
        a = (rng.standard_normal(shape) * (0.9 if reducer == "product" else 4)).astype(dtype)
        flat = a.reshape(-1)
        flat[[0, 3]] = [np.nan, -0.0]
    else:
        a = rng.integers(0, 7, shape).astype(dtype)
    red_obj = getattr(ms.red, reducer)
    for pad in (False, True):
        x = _tensor(a, pad=pad)
        try:
            exp = build(x, red_obj)
        except Exception as err:            # an integer scaled by 0.3: refused as reduce.py does
            assert np.dtype(dtype).kind != "f" and "scale" in str(err)
            return
        for dpad in (False, True):
            fast = ms.new_tensor(tuple(exp.shape), dtype=dtype, pad=dpad, init=3)
            slow = ms.new_tensor(tuple(exp.shape), dtype=dtype, pad=dpad, init=3)
            fast[:] = exp
            red_mod._eval(slow, exp, "saveto")                  # reduce.py's own route
            np.testing.assert_array_equal(fast.numpy(), slow.numpy(),
                                          err_msg=f"{name} pad={pad}/{dpad}")
        _check_numpy(fast.numpy(), a, name, reducer, exp)


def _check_numpy(got, a, name, reducer, exp):
    """The values against numpy: integers exactly (wrapping in the dtype), floats closely
    (NaN where numpy has one)."""
    axis = a.ndim - 1                  # (each case reduces the last axis alone)
    f = {"sum": np.add, "maximum": np.maximum, "minimum": np.minimum,
         "product": np.multiply}[reducer]
    if a.dtype.kind == "f":
        want = f.reduce(a.astype(np.float64), axis=axis)
        want = want * float(exp.scale)
        scale = np.nanmax(np.abs(want)) if np.isfinite(want).any() else 1.0
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4,
                                   atol=1e-5 * (scale + 1), err_msg=name)
    else:
        want = f.reduce(a, axis=axis, dtype=a.dtype).astype(np.int64) * int(exp.scale)
        np.testing.assert_array_equal(got.reshape(want.shape), want.astype(a.dtype),
                                      err_msg=name)


def test_a_tensors_rows_from_the_statement_path_never_enter_reduce_py(monkeypatch):
    def refuse(dst, exp, saver):
        raise AssertionError(f"reduce.py ran {exp!r} ({saver})")
    a = np.arange(60, dtype=np.float32).reshape(4, 15)
    x, y = _tensor(a), ms.new_tensor((4,))
    y[:] = ms.reduce_with_axis(x, 1, ms.red.maximum)      # (the first statement decides)
    monkeypatch.setitem(ms.engine._complex_engines, "reduce", refuse)
    for r, want in ((ms.red.sum, a.sum(1)), (ms.red.maximum, a.max(1)),
                    (ms.red.minimum, a.min(1))):
        y[:] = ms.reduce_with_axis(x, 1, r)
        y[:] = ms.reduce_with_axis(x, 1, r)
        np.testing.assert_array_equal(y.numpy(), want)
    v = x[1:3]                                            # a view is a tensor too
    y2 = ms.new_tensor((2,))
    y2[:] = ms.reduce_with_axis(v, 1, ms.red.sum)
    y2[:] = ms.reduce_with_axis(v, 1, ms.red.sum)
    np.testing.assert_array_equal(y2.numpy(), a[1:3].sum(1))


def test_a_tensors_rows_into_their_own_tensor():
    a = np.arange(1, 17, dtype=np.float32).reshape(4, 4)
    x = _tensor(a)
    for _ in range(2):                                    # decided, then from the site
        x[:] = _tensor(a)
        x[0][:] = ms.reduce_with_axis(x, 1, ms.red.sum)   # dst is the first row it reads
        np.testing.assert_array_equal(x.numpy()[0], a.sum(1))
        np.testing.assert_array_equal(x.numpy()[1:], a[1:])


def test_a_freed_tensor_source_raises_from_the_statement_path():
    x, y = _tensor(np.ones((4, 8), np.float32)), ms.new_tensor((4,))
    e = ms.reduce_with_axis(x, 1, ms.red.sum)
    y[:] = e
    ms.free_space(x)
    with pytest.raises(ms.FreedTensorError):
        y[:] = e
    np.testing.assert_array_equal(y.numpy(), 8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape,axis,keep", [((300, 7), 0, False), ((70, 5, 9), 1, False),
                                             ((130, 33), 0, True), ((3, 200, 4), 0, False)])
def test_a_tensors_sum_over_any_axis_has_the_bits_of_its_expression(shape, axis, keep, dtype):
    """reduce_with_axis(x, k) and reduce_with_axis(x * 1, k): one fused pass, the same bits
    (a tensor's leading axes went through numpy's order; more than 64 rows differed)."""
    rng = np.random.default_rng(17)
    a = ((rng.standard_normal(shape) * 3) if np.dtype(dtype).kind == "f"
         else rng.integers(-50, 50, shape)).astype(dtype)
    x = _tensor(a)
    one = 1 if np.dtype(dtype).kind == "i" else 1.0
    f = ms.reduce_keepdim if keep else ms.reduce_with_axis
    out = a.sum(axis, keepdims=keep).shape
    for pad in (False, True):
        t, e = ms.new_tensor(out, dtype=dtype, pad=pad), ms.new_tensor(out, dtype=dtype, pad=pad)
        for _ in range(2):                          # decided, then from the site
            t[:] = f(x, axis, ms.red.sum)
            e[:] = f(x * one, axis, ms.red.sum)
            np.testing.assert_array_equal(t.numpy(), e.numpy())
        want = a.astype(np.float64).sum(axis, keepdims=keep)
        if np.dtype(dtype).kind == "i":
            np.testing.assert_array_equal(t.numpy(), want.astype(dtype))
        else:
            tol = 2e-3 if dtype == np.float16 else 1e-5
            np.testing.assert_allclose(t.numpy().astype(np.float64), want, rtol=tol, atol=tol * 30)


@pytest.mark.parametrize("case", ["rows of a tensor", "a small sum"])
def test_a_destination_resized_by_another_thread_during_the_statement(case):
    """The values are computed without the GIL; another thread may resize the destination
    meanwhile. Its geometry is read again before the stores: a ShapeError or the right
    values, never a read past the stack buffer (a segfault before)."""
    import sys
    import threading
    import time
    if case == "rows of a tensor":
        x = ms.new_tensor((4096, 8), init=1.0)
        build, want = (lambda: ms.reduce_with_axis(x, 1, ms.red.maximum)), 1.0
        n = 4096
    else:
        x = ms.new_tensor((8192, 4), init=1.0)
        build, want = (lambda: ms.sum_rows(x)), 8192.0
        n = 4
    c = ms.TensorContainer((n,))
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            c.resize((1 << 16,))
            c.resize((n,))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=flip)
    t.start()
    try:
        t0 = time.time()
        while time.time() - t0 < 1.5:
            try:
                c[:] = build()
            except ShapeError:
                pass
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    c.resize((n,))
    c[:] = build()
    np.testing.assert_array_equal(c.numpy(), want)


def test_a_small_statement_makes_no_array():
    """_reduce_small keeps its partials on the stack: a statement's peak of traced memory
    (numpy traces its arrays' buffers) stays where it was; past 16 KiB the route of arrays
    runs, and its arrays show."""
    import tracemalloc

    def peak_of(shape):
        x, y = ms.new_tensor(shape, init=1.0), ms.new_tensor((shape[1],))
        e = ms.sum_rows(x)
        y[:] = e                              # (the first statement decides its recipe)
        tracemalloc.start()
        try:
            y[:] = e
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            y[:] = e
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        np.testing.assert_array_equal(y.numpy(), shape[0])
        return peak

    assert peak_of((64, 500)) < 1024          # partials 2 KB, sums 4 KB + 4 KB: the stack
    assert peak_of((64, 3000)) > 12000        # 12 + 24 + 24 KB: arrays


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("reducer", ["maximum", "minimum", "product", "sum"])
@pytest.mark.parametrize("shape", [(64, 64), (7, 130), (3, 4, 200), (200, 1)])
def test_an_expressions_rows_with_any_reducer_run_compiled(shape, reducer, dtype):
    """reduce_with_axis(e, -1, r) in registers by rows of one block: the partials are the
    values (reduce.py's numpy step over one block a row keeps them), so the statement path
    takes maximum, minimum and product too, with reduce.py's bits (NaN, -0 and inf kept)."""
    rng = np.random.default_rng(19)
    a = (rng.standard_normal(shape) * (0.9 if reducer == "product" else 3)).astype(dtype)
    flat = a.reshape(-1)
    flat[[0, 5, 9]] = [np.nan, -0.0, np.inf]
    x = _tensor(a)
    red_obj = getattr(ms.red, reducer)
    for build in (lambda: ms.reduce_with_axis(x * 1, len(shape) - 1, red_obj),
                  lambda: ms.reduce_keepdim(ms.F(ms.op.identity, x), len(shape) - 1, red_obj) * -2):
        exp = build()
        fast = ms.new_tensor(tuple(exp.shape), dtype=dtype, init=5)
        slow = ms.new_tensor(tuple(exp.shape), dtype=dtype, init=5)
        assert _core.reduce_fast(fast, exp, "saveto", 1)
        with np.errstate(all="ignore"):
            red_mod._eval(slow, exp, "saveto")
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
        np.testing.assert_array_equal(fast.numpy().view(bits), slow.numpy().view(bits))
        f = {"sum": np.add, "maximum": np.maximum, "minimum": np.minimum,
             "product": np.multiply}[reducer]
        with np.errstate(all="ignore"):
            want = f.reduce(a.astype(np.float64), axis=-1, keepdims=exp.form == "keepdim")
            want = want * float(exp.scale)
        got = fast.numpy().astype(np.float64).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=3e-3 if dtype == np.float16 else 1e-4,
                                   atol=1e-2 if dtype == np.float16 else 1e-4)
