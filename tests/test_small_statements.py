"""The per-statement path of a small element-wise statement: interned Map nodes and the
plan each node's site remembers (mshadow/_exp.pxi make_map, _tensor.pxi _assign).

numpy is the oracle for values; the plan cache's counters say whether a statement went
back to the cache or ran a remembered plan."""
import gc
import weakref

import numpy as np
import pytest

import mshadow as ms
from mshadow import _core


def _vec(vals, dtype=np.float32):
    return ms.from_numpy(np.asarray(vals, dtype=dtype))


@pytest.fixture(autouse=True)
def _empty_plan_cache():
    """Each test starts with an empty plan cache, so that no statement of the test evicts
    plans (an eviction empties the sites' tables, which the tests here look into)."""
    _core.clear_plan_cache()


@pytest.fixture
def small_cache():
    """A plan cache bounded at 1 plan for the test, restored after it."""
    _, _, size, _ = _core.plan_cache_counts()
    yield
    _core.set_plan_cache_size(size)


def test_a_structure_built_again_gets_the_same_node():
    a, b = _vec([1, 2, 3]), _vec([4, 5, 6])
    k1 = (-0.5 * (a + 2.0 * b)).key
    k2 = (-0.25 * (b + 3.0 * a)).key          # other tensors and scalars: the same structure
    assert k1 is k2
    assert (a - 2.0 * b).key is not k1 and (a - 2.0 * b).key != k1
    # a node built apart from the table is still equal to it (the cache compares structure)
    assert ms.ir.Map("plus", "f32", ms.ir.LEAF["f32"], ms.ir.LEAF["f32"]) == (a + b).key


def test_values_bind_in_argument_order_whichever_operand_holds_them():
    # a node reuses an operand's leaves or scalars tuple when that operand holds them all
    a_np, b_np = np.array([1.0, 2.0, 3.0]), np.array([-4.0, 0.5, 8.0])
    a, b = ms.from_numpy(a_np), ms.from_numpy(b_np)
    out = ms.new_tensor((3,), dtype=np.float64)
    cases = [
        (lambda: 2.0 * (a - 3.0), 2.0 * (a_np - 3.0)),
        (lambda: (a * 5.0) - 7.0, a_np * 5.0 - 7.0),
        (lambda: 7.0 - (a * 5.0), 7.0 - a_np * 5.0),
        (lambda: (a * 2.0) / (b * 3.0), (a_np * 2.0) / (b_np * 3.0)),
        (lambda: (a * 2.0) / (b - a), (a_np * 2.0) / (b_np - a_np)),
        (lambda: (b - a) / (a * 2.0), (b_np - a_np) / (a_np * 2.0)),
        (lambda: ms.where(a - 2.0, b * 3.0, a / 4.0),
         np.where(a_np - 2.0 != 0, b_np * 3.0, a_np / 4.0)),
        (lambda: -(b / (a + 0.5)), -(b_np / (a_np + 0.5))),
    ]
    for build, want in cases:
        for _ in range(2):                    # the second statement runs the remembered plan
            out[:] = build()
            np.testing.assert_array_equal(out.numpy(), want)


def test_an_evicted_plan_is_not_run_from_a_site(small_cache):
    """A site remembers its plan only while the cache still holds it: once evicted, the next
    statement asks the cache again (a miss, compiled anew), so the cache's bound holds."""
    a, b = _vec([1, 2, 3]), _vec([4, 5, 6])
    out = ms.new_tensor((3,))
    _core.set_plan_cache_size(1)
    out[:] = a * 2.0 + b                      # structure P
    out[:] = a * 2.0 + b                      # P from its site
    _, misses, _, _ = _core.plan_cache_counts()
    out[:] = a - b * 3.0                      # structure Q evicts P
    np.testing.assert_array_equal(out.numpy(), [-11, -13, -15])
    assert _core.plan_cache_counts()[1] == misses + 1
    out[:] = a * 2.0 + b                      # P again: back through the cache
    np.testing.assert_array_equal(out.numpy(), [6, 9, 12])
    assert _core.plan_cache_counts()[1] == misses + 2
    assert _core.plan_cache_counts()[3] <= 1


def test_a_cleared_cache_is_asked_again():
    a = _vec([1, 2, 3])
    out = ms.new_tensor((3,))
    out[:] = a * 4.0 - 1.0
    _core.clear_plan_cache()
    out[:] = a * 4.0 - 1.0
    assert _core.plan_cache_counts()[:2] == (0, 1)
    np.testing.assert_array_equal(out.numpy(), [3, 7, 11])


def test_a_site_tells_savers_and_destination_dtypes_apart():
    a_np = np.array([1.0, 2.0, 3.0], np.float32)
    a = ms.from_numpy(a_np)
    out = ms.new_tensor((3,), init=10)
    out[:] = a * 2.0
    out += a * 2.0
    out -= a * 2.0
    out *= a * 2.0
    np.testing.assert_array_equal(out.numpy(), (a_np * 2.0) * (a_np * 2.0))
    ai = ms.from_numpy(np.array([1, 2, 3], np.int32))
    oi = ms.new_tensor((3,), dtype=np.int32)
    out[:] = a * 2.0
    oi[:] = ai * 2                            # another code: another node and plan
    out += a * 2.0
    np.testing.assert_array_equal(oi.numpy(), [2, 4, 6])
    np.testing.assert_array_equal(out.numpy(), a_np * 4.0)


def test_structures_that_share_the_tables_slots():
    # a thousand-odd nodes in a direct-mapped table: slots are taken over by other
    # structures, and every statement still evaluates its own
    a_np = np.linspace(-1, 1, 8)
    a = ms.from_numpy(a_np)
    out = ms.new_tensor((8,), dtype=np.float64)
    ops = [lambda e: e + 1.0, lambda e: e * 0.5, lambda e: ms.F("tanh", e),
           lambda e: e - a, lambda e: ms.F("abs", e)]
    ref = [lambda x: x + 1.0, lambda x: x * 0.5, np.tanh, lambda x: x - a_np, np.abs]
    rng = np.random.default_rng(3)
    for trial in range(300):
        picks = rng.integers(0, len(ops), size=rng.integers(1, 6))
        e, want = a, a_np
        for p in picks:
            e, want = ops[p](e), ref[p](want)
        out[:] = e
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("n", [0, 4])
def test_an_operator_takes_one_to_three_operands(n):
    a = _vec([1, 2])
    with pytest.raises(TypeError, match="takes 1 to 3 operands, got %d" % n):
        _core.make_map("plus", (a,) * n)


def _closure_op():
    class Held:
        pass
    held = Held()

    @ms.op.define
    def shift(a):
        return a + 0.5

    shift.held = held              # only the operator holds it
    return shift, weakref.ref(held)


def test_an_evicted_structure_releases_its_defined_operator(small_cache):
    """A site holds its node, and the node its operator: the table is emptied whenever the
    cache drops entries, so a deleted operator lives no longer than the cache keeps it."""
    op, held = _closure_op()
    a = _vec([1, 2, 3])
    out = ms.new_tensor((3,))
    out[:] = ms.F(op, a) * 2.0
    out[:] = ms.F(op, a) * 2.0
    np.testing.assert_array_equal(out.numpy(), [3, 5, 7])
    del op
    _core.set_plan_cache_size(1)
    out[:] = a - 1.0                 # another structure: the operator's plan is evicted
    gc.collect()
    assert held() is None, "an evicted structure's site keeps its defined operator alive"


def test_a_defined_operator_never_assigned_is_not_kept():
    # only built-in structures enter the table: an expression of a defined operator that
    # was built but never assigned (or whose assignment raised) does not keep it alive
    a = _vec([0, 1, 2, 3])
    op, held = _closure_op()
    e = ms.F(op, a) * 2.0             # the parent is built-in, its child is not
    del e, op
    gc.collect()
    assert held() is None
    op, held = _closure_op()
    with pytest.raises(ms.ShapeError):
        ms.new_tensor((5,))[:] = ms.F(op, a) - 1.0
    del op
    gc.collect()
    assert held() is None


def test_scalar_conversion_that_drops_an_operands_node():
    """A scalar's conversion runs Python code (``__float__`` of an int subclass); the
    children's nodes are taken after it and held while the node is found: dropping an
    operand's node meanwhile cannot leave the node pointing at freed memory."""
    x64 = ms.from_numpy(np.ones(4, np.float64))
    victim = ms.tcast(np.float32, x64 * 2.0)

    class Dropping(int):
        def __float__(self):
            victim.key = None
            gc.collect()
            [tuple(range(i % 9)) for i in range(20000)]     # reuse the freed memory
            return 3.0

    e = victim + Dropping(3)
    assert ms.ir.describe(e.key) == "plus(tcast<f32>(mul(Tensor<f64>, scalar)), scalar)"
    out = ms.new_tensor((4,))
    out[:] = e
    np.testing.assert_array_equal(out.numpy(), [5, 5, 5, 5])


def test_a_kcomplex_node_whose_key_is_not_a_node_raises():
    class Odd(ms.expr.ScaledExp):
        pass

    out = ms.new_tensor((3,))
    for key in (None, [], ["dot"], ()):
        k = Odd.__new__(Odd)
        k.exp_type, k.key, k.shape, k.code, k.leaves, k.scalars = 7, key, out.shape, "f32", (), ()
        with pytest.raises((TypeError, KeyError, IndexError, AttributeError)):
            out[:] = k


def test_a_site_checks_the_expressions_key():
    # Exp.key is writable: a remembered plan runs only for the node it was found for
    a_np = np.arange(1, 5, dtype=np.float32)
    a, b = ms.from_numpy(a_np), ms.from_numpy(a_np[::-1].copy())
    out = ms.new_tensor((4,))
    out[:] = a * b
    e = a + b
    out[:] = e
    out[:] = e
    e.key = (a * b).key
    out[:] = e
    np.testing.assert_array_equal(out.numpy(), a_np * a_np[::-1])


def test_shapes_compared_by_their_dims():
    # equal dims above 256 are distinct int objects: the identity fast path falls back to
    # comparing values, and unequal shapes still raise
    a = ms.new_tensor((3, 1000), init=1.0)
    b = ms.from_numpy(np.full((3, 1000), 2.0, np.float32))
    out = ms.new_tensor((3, 1000))
    out[:] = a * 2.0 + b
    np.testing.assert_array_equal(out.numpy(), 4.0)
    with pytest.raises(ms.ShapeError, match="Shapes of operands are not the same"):
        a + ms.new_tensor((3, 1001))
    with pytest.raises(ms.ShapeError):
        ms.new_tensor((1000, 3))[:] = a * 2.0


# ---- interned gather nodes (_gather.pxi _GatherSite) -------------------------------------

def _pool_ref(x, k, s):
    """numpy's max pool of the last two axes, windows k x k at stride s (no clipping)."""
    oh, ow = (x.shape[-2] - k) // s + 1, (x.shape[-1] - k) // s + 1
    out = np.full(x.shape[:-2] + (oh, ow), -np.inf, x.dtype)
    for i in range(k):
        for j in range(k):
            out = np.maximum(out, x[..., i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s])
    return out


def test_a_gather_of_interned_expressions_built_again_shares_its_args_and_node():
    x_np = np.random.default_rng(0).uniform(-1, 1, (1, 2, 8, 8)).astype(np.float32)
    x = ms.from_numpy(x_np)
    a = ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 2, 2)
    b = ms.pool(ms.F(ms.op.relu, x * 3.0), 2, 2, 2, 2)   # another scalar: the same structure
    assert a.key is b.key and a.leaves[0] is b.leaves[0]
    # other parameters, another source structure, another source shape: not shared
    c = ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 1, 1)
    d = ms.pool(ms.F(ms.op.sigmoid, x * 2.0), 2, 2, 2, 2)
    x2 = ms.from_numpy(np.zeros((1, 2, 6, 6), np.float32))
    e = ms.pool(ms.F(ms.op.relu, x2 * 2.0), 2, 2, 2, 2)
    assert c.leaves[0] is not a.leaves[0] and c.leaves[0].params != a.leaves[0].params
    assert d.key is not a.key and d.key != a.key
    assert e.leaves[0] is not a.leaves[0] and e.shape == (1, 2, 3, 3)
    # and each computes its own values, two of them in one statement too
    y = ms.new_tensor((1, 2, 4, 4))
    y[:] = a
    np.testing.assert_array_equal(y.numpy(), _pool_ref(np.maximum(x_np * 2, 0), 2, 2))
    y[:] = b + ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 2, 2)
    want = _pool_ref(np.maximum(x_np * 3, 0), 2, 2) + _pool_ref(np.maximum(x_np * 2, 0), 2, 2)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    z = ms.new_tensor((1, 2, 7, 7))
    z[:] = c
    np.testing.assert_array_equal(z.numpy(), _pool_ref(np.maximum(x_np * 2, 0), 2, 1))


def test_a_gather_site_tells_each_parameter_apart():
    """A site is found by its parameters as C integers (pool_node's, and the tuple of any
    other gather's): pools that differ in one window size, stride or the reducer, built in
    turn, each share only with their equal and compute their own values; so do pads."""
    x_np = np.random.default_rng(1).uniform(-1, 1, (1, 2, 9, 9)).astype(np.float32)
    x = ms.from_numpy(x_np)
    windows = [(2, 2, 2, 2, ms.red.maximum), (3, 2, 2, 2, ms.red.maximum),
               (2, 3, 2, 2, ms.red.maximum), (2, 2, 1, 2, ms.red.maximum),
               (2, 2, 2, 1, ms.red.maximum), (2, 2, 2, 2, ms.red.minimum),
               (1, 1, 1, 1, ms.red.maximum), (2, 2, 2 ** 40, 2, ms.red.maximum)]
    # Built twice in a row, a pool shares its site; built in turn, two sets of parameters may
    # take one slot (the table is direct-mapped), so sharing is asked of each one alone.
    nodes = []
    for ky, kx, sy, sx, r in windows:
        a = ms.pool(ms.F(ms.op.relu, x * 2.0), ky, kx, sy, sx, r)
        b = ms.pool(ms.F(ms.op.relu, x * 3.0), ky, kx, sy, sx, r)
        assert a.leaves[0] is b.leaves[0], (ky, kx, sy, sx)
        nodes.append(a)
    args = [n.leaves[0] for n in nodes]
    assert len({id(a) for a in args}) == len(windows)
    for rounds in range(2):
        if rounds:                # built again, after the others: equal to the first only
            nodes = [ms.pool(ms.F(ms.op.relu, x * 2.0), ky, kx, sy, sx, r)
                     for ky, kx, sy, sx, r in windows]
            for i, n in enumerate(nodes):
                assert all(n.leaves[0] is not a for a in args[:i] + args[i + 1:])
                assert n.leaves[0].params == args[i].params
        for (ky, kx, sy, sx, r), node in zip(windows, nodes):
            ref = np.maximum(x_np * 2, 0)
            oh, ow = (9 - ky) // sy + 1, (9 - kx) // sx + 1
            out = np.full((1, 2, oh, ow), -np.inf if r is ms.red.maximum else np.inf,
                          np.float32)
            fold = np.maximum if r is ms.red.maximum else np.minimum
            oy, ox = np.arange(oh)[:, None] * sy, np.arange(ow)[None, :] * sx
            for i in range(ky):
                for j in range(kx):
                    out = fold(out, ref[..., oy + i, ox + j])
            y = ms.new_tensor((1, 2, oh, ow))
            y[:] = node
            np.testing.assert_array_equal(y.numpy(), out, err_msg=f"{ky, kx, sy, sx}")
    pads = [ms.pad(ms.F(ms.op.relu, x * 2.0), p) for p in (1, 1, 2)]
    assert pads[0].leaves[0] is pads[1].leaves[0] is not pads[2].leaves[0]
    assert pads[2].shape == (1, 2, 13, 13)


def test_a_gather_site_remembers_its_plan_until_the_cache_is_cleared():
    x_np = np.arange(2 * 8 * 8, dtype=np.float32).reshape(1, 2, 8, 8) - 60
    x = ms.from_numpy(x_np)
    y = ms.new_tensor((1, 2, 4, 4))
    y[:] = ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 2, 2)
    hits, misses, _, _ = _core.plan_cache_counts()
    y[:] = ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 2, 2)   # the site's plan: no lookup
    assert _core.plan_cache_counts()[:2] == (hits, misses)
    args = ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 2, 2).leaves[0]
    _core.clear_plan_cache()
    again = ms.pool(ms.F(ms.op.relu, x * 2.0), 2, 2, 2, 2)
    assert again.leaves[0] is not args          # the sites went with the plans
    y[:] = again
    assert _core.plan_cache_counts()[:2] == (0, 1)
    np.testing.assert_array_equal(y.numpy(), _pool_ref(np.maximum(x_np * 2, 0), 2, 2))


def test_a_gather_of_a_defined_operator_is_not_interned_and_releases_it():
    op, held = _closure_op()
    x = ms.from_numpy(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    y = ms.new_tensor((1, 1, 2, 2))
    a = ms.pool(ms.F(op, x), 2, 2, 2, 2)
    assert ms.pool(ms.F(op, x), 2, 2, 2, 2).leaves[0] is not a.leaves[0]
    y[:] = a
    np.testing.assert_array_equal(y.numpy(), [[[[5.5, 7.5], [13.5, 15.5]]]])   # op: x + 0.5
    del a, op
    _core.clear_plan_cache()
    gc.collect()
    assert held() is None, "a gather site keeps a defined operator alive"
