"""Views over expressions: a view's source may be any element-wise expression, another view
or a transposed tensor, to any depth; the index maps compose down to the leaves, so the
assignment stays one fused pass. numpy is the oracle (bit for bit: only exact operators)."""
import numpy as np
import pytest

import mshadow as ms

RNG = np.random.default_rng(7)


def _views(shape):
    """(name, ms view, numpy view) applicable to an operand of ``shape``."""
    nd = len(shape)
    out = [("flip0", lambda e: ms.flip(e, 0), lambda a: a[::-1]),
           ("mirror", ms.mirror, lambda a: a[..., ::-1])]
    if nd >= 2:
        out.append(("T", lambda e: ms.transpose_axes(e, tuple(range(nd))[::-1]),
                    lambda a: a.transpose(tuple(range(nd))[::-1])))
        out.append(("swap01", lambda e: ms.swapaxis(e, 0, 1), lambda a: a.swapaxes(0, 1)))
        if shape[-1] >= 3 and shape[-2] >= 2:
            out.append(("crop", lambda e: ms.crop(e, (shape[-2] - 1, shape[-1] - 2), 1, 1),
                        lambda a: a[..., 1:shape[-2], 1:shape[-1] - 1]))
    if shape[0] >= 2:
        out.append(("slice", lambda e: ms.slice_axis(e, 0, 1, shape[0]), lambda a: a[1:]))
    if nd == 2:
        out.append(("bcast_axis", lambda e: ms.broadcast_with_axis(e, 0, 2),
                    lambda a: np.broadcast_to(a[:, None, :], (a.shape[0], 2, a.shape[1]))))
    return out


def _elementwise(shape, dtype):
    b = RNG.integers(-4, 5, shape).astype(dtype)
    tb = ms.from_numpy(b.copy())
    return [("relu", lambda e: ms.F(ms.op.relu, e), lambda a: np.maximum(a, 0).astype(dtype)),
            ("*2+b", lambda e: e * 2 + tb, lambda a: a * dtype(2) + b),
            ("-b", lambda e: tb - e, lambda a: b - a),
            ("neg", lambda e: -e, lambda a: -a)]


def _random_tree(x, xt, depth, dtype):
    """Alternate element-wise operators and views over ``xt`` (tensor) / ``x`` (array)."""
    e, a, desc = xt, x, "x"
    for _ in range(depth):
        name, f, g = _elementwise(a.shape, dtype)[RNG.integers(4)]
        e, a, desc = f(e), g(a), f"{name}({desc})"
        vs = _views(a.shape)
        name, f, g = vs[RNG.integers(len(vs))]
        e, a, desc = f(e), g(a), f"{name}({desc})"
    return e, a, desc


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("saver", ["saveto", "plusto", "minusto", "multo"])
def test_random_nested_views_match_numpy(dtype, depth, saver):
    for trial in range(6):
        shape = (4, 6) if trial % 2 else (3, 4, 5)
        x = RNG.integers(-5, 6, shape).astype(dtype)
        e, want, desc = _random_tree(x, ms.from_numpy(x.copy()), depth, dtype)
        d0 = RNG.integers(-3, 4, want.shape).astype(dtype)
        dst = ms.from_numpy(d0.copy())
        op = {"saveto": lambda d, w: w, "plusto": lambda d, w: d + w,
              "minusto": lambda d, w: d - w, "multo": lambda d, w: d * w}[saver]
        {"saveto": dst.__setitem__}.get(saver, lambda k, v: None)(slice(None), e)
        if saver == "plusto":
            dst += e
        elif saver == "minusto":
            dst -= e
        elif saver == "multo":
            dst *= e
        np.testing.assert_array_equal(dst.numpy(), op(d0, want).astype(dtype), err_msg=desc)


def test_nested_views_are_one_fused_pass_without_temporaries():
    x = ms.new_tensor((8, 16), 1.0)
    y = ms.new_tensor((16, 8))
    e = ms.transpose_axes(ms.flip(ms.F(ms.op.relu, x - 0.5) * 2, 0), (1, 0))
    plan = ms.plan_for(y, e)
    lines = plan.disassemble().splitlines()
    # the transposed view is read a block at a time into one block-sized register, then one
    # fused chain: no full-size temporary anywhere
    assert "@view(strided step)" in lines[0] and plan.program.nreg == 1
    assert lines[1:] == ["r0 = minus_f32(L0, s0)", "dst = chain_f32[r0 -> relu(_) -> mul(_, s1)]"]
    leaves = e.leaves
    assert len(leaves) == 1 and leaves[0].src is x           # reads x in place


def test_views_over_expressions_reading_the_destination():
    a = RNG.integers(-5, 6, (6, 6)).astype(np.float32)
    t = ms.from_numpy(a.copy())
    t[:] = ms.flip(t * 2 + 1, 0)                  # reads rows the assignment overwrites
    np.testing.assert_array_equal(t.numpy(), (a * 2 + 1)[::-1])
    t2 = ms.from_numpy(a.copy())
    t2 += ms.transpose_axes(ms.F(ms.op.relu, t2), (1, 0))
    np.testing.assert_array_equal(t2.numpy(), a + np.maximum(a, 0).T)
    t3 = ms.from_numpy(a.copy())
    other = ms.from_numpy(t3.numpy())              # a second wrapper of the same memory
    t3[:] = ms.mirror(other - 1)
    np.testing.assert_array_equal(t3.numpy(), (a - 1)[:, ::-1])


def test_broadcast_of_an_expression_and_reshape_through_views():
    b = np.arange(6, dtype=np.float32)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    tb, tx = ms.from_numpy(b), ms.from_numpy(x)
    y = ms.new_tensor((4, 6))
    y[:] = tx + ms.broadcast(ms.F(ms.op.relu, tb - 2) * 3, (4, 6), 1)
    np.testing.assert_array_equal(y.numpy(), x + np.maximum(b - 2, 0) * 3)
    z = ms.new_tensor((4, 3, 2))
    z[:] = ms.reshape(ms.flip(tx, 0) + 1, (4, 3, 2))     # splits the unit-stride axis
    np.testing.assert_array_equal(z.numpy(), (x[::-1] + 1).reshape(4, 3, 2))
    w = ms.new_tensor((6, 4))                            # rows reversed: not one stride,
    w[:] = ms.reshape(ms.flip(tx, 0), (6, 4))            # so the flipped view is re-cut by
    np.testing.assert_array_equal(w.numpy(), x[::-1].reshape(6, 4))   # the reshape reader


def test_transpose_of_views_composes():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    tx = ms.from_numpy(x)
    y = ms.new_tensor((4, 3), dtype=np.float64)
    y[:] = (ms.flip(tx, 1) * 2 + tx).T
    np.testing.assert_array_equal(y.numpy(), (x[:, ::-1] * 2 + x).T)
    y[:] = ms.mirror(tx.T + 1)
    np.testing.assert_array_equal(y.numpy(), (x.T + 1)[:, ::-1])
