"""The CUDA emitter's gathers and views (mshadow/cuda/lower.py), with no GPU: NVRTC compiles
the kernel of every reader row (mshadow/readers.py) for every dtype, and the host SIMT
harness (tests/cuda_host.py) runs it and must store the CPU backend's bits: over tensors
(pitched), strided views, element-wise and gathered sources (inlined), and random trees."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import ir
from mshadow.cuda.lower import emit
from mshadow.dtypes import BY_CODE, FLOAT_CODES
from mshadow.errors import UnsupportedNodeError
from mshadow.readers import READERS

import cuda_host
from test_cuda_emit import (ARCHS, CODES, Case, compile_all, needs_gxx, needs_nvrtc, run_cases,
                            tensor)

RED = (ms.red.sum, ms.red.maximum, ms.red.minimum, ms.red.product)


def ints(rng, shape, lo, hi, code="i32"):
    """An index tensor of dtype ``code`` holding values in [lo, hi)."""
    t = ms.new_tensor(shape, 0, dtype=BY_CODE[code].np)
    np.asarray(t)[...] = rng.randint(lo, hi, size=shape).astype(BY_CODE[code].np)
    return t


def small(rng, code, shape):
    """Small exact values (the gradient readers multiply and sum them)."""
    t = ms.new_tensor(shape, 0, dtype=BY_CODE[code].np, pad=bool(rng.randint(2)))
    np.asarray(t)[...] = rng.randint(-3, 4, size=shape).astype(BY_CODE[code].np)
    return t


def idx_code(rng):
    return ("i32", "f32", "i64", "u8", "f16")[rng.randint(5)]


# one builder per reader row: (rng, code, src) -> expression; ``src(code, shape)`` makes a
# value source (a tensor, or an element-wise expression of that shape)
def b_pad(r, c, src):
    return ms.pad(src(c, (2, 3, 4)), 1, 2)


def b_take(r, c, src):
    return ms.take(ints(r, (5,), 0, 4, idx_code(r)), src(c, (4, 6)))


def b_choose_row(r, c, src):
    return ms.mat_choose_row_element(src(c, (5, 6)), ints(r, (5,), 0, 6, idx_code(r)))


def b_fill_row(r, c, src):
    return ms.mat_fill_row_element(src(c, (5, 6)), src(c, (5,)), ints(r, (5,), 0, 6))


def b_upsample(r, c, src):
    return ms.upsampling_nearest(src(c, (2, 3, 4)), 2)


def b_one_hot(r, c, src):
    return ms.one_hot_encode(ints(r, (6,), 0, 5, idx_code(r)), 5, dtype=BY_CODE[c].np)


def b_range(r, c, src):
    if c in FLOAT_CODES:
        return ms.range(0.5, 9.0, 0.75, repeat=2, dtype=BY_CODE[c].np)
    return ms.range(1, 40, 3, repeat=2, dtype=BY_CODE[c].np)


def b_concat(r, c, src):
    if r.randint(2):
        return ms.concat(src(c, (2, 3, 4)), src(c, (2, 3, 5)), 2)
    return ms.concat(src(c, (2, 3, 4)), src(c, (2, 2, 4)), 1)


def b_reshape(r, c, src):
    t = ms.new_tensor((4, 6), 0, dtype=BY_CODE[c].np, pad=True)
    np.asarray(t)[...] = np.asarray(small(r, c, (4, 6)))
    return ms.reshape(t, (3, 8))


def b_im2col(r, c, src):
    return ms.unpack_patch2col(src(c, (2, 2, 5, 6)), 3, 2, 1, 2, 2, 1)


def b_pool(r, c, src):
    return ms.pool(src(c, (2, 5, 7)), 3, 2, 2, 2, RED[r.randint(4)])


def _pooled(r, c, red, pool, ky, kx, sy, sx, **kw):
    data = small(r, c, (2, 3, 6, 5))
    pooled = pool(data, red)
    out = ms.new_tensor(pooled.shape, 0, dtype=BY_CODE[c].np)
    out[:] = pooled
    return data, out, small(r, c, pooled.shape)


def b_unpool(r, c, src):
    red = (ms.red.sum, ms.red.maximum, ms.red.minimum)[r.randint(3)]
    d, p, g = _pooled(r, c, red, lambda x, rd: ms.pool(x, 2, 3, 2, 1, rd), 2, 3, 2, 1)
    return ms.unpool(d, p, g, 2, 3, 2, 1, red)


def b_chpool(r, c, src):
    return ms.chpool(src(c, (2, 4, 3, 5)), 3, RED[r.randint(4)], 1, 1)


def b_ch_unpool(r, c, src):
    red = (ms.red.sum, ms.red.maximum)[r.randint(2)]
    d, p, g = _pooled(r, c, red, lambda x, rd: ms.chpool(x, 3, rd, 1, 1), 0, 0, 0, 0)
    return ms.ch_unpool(d, p, g, 3, red, 1, 1)


def b_col2im(r, c, src):
    return ms.pack_col2patch(src(c, (2 * 3 * 2, 2 * 3 * 3)), (2, 2, 5, 4), 3, 2, 1, 1, 1, 1)


def b_reduce_axis(r, c, src):
    red = RED[r.randint(4)]
    e = ms.reduce_with_axis(src(c, (2, 4, 3, 5)), 1, red, bool(r.randint(2)) and red in RED[1:3])
    return ms.F("identity", e)


def b_reduce_last(r, c, src):
    red = RED[r.randint(4)]
    e = ms.reduce_with_axis(src(c, (3, 4, 5)), 2, red, bool(r.randint(2)) and red in RED[1:3])
    return ms.F("identity", e)


def b_take_grad(r, c, src):
    return ms.take_grad(ints(r, (7,), 0, 4, idx_code(r)), src(c, (7, 5)), 4)


def _cx(name, shapes):
    def build(r, c, src):
        return getattr(ms, name)(*[src(c, s) for s in shapes])
    return build


BUILDERS = {
    "pad": b_pad, "take": b_take, "choose_row": b_choose_row, "fill_row": b_fill_row,
    "upsample": b_upsample, "one_hot": b_one_hot, "range": b_range, "concat": b_concat,
    "reshape": b_reshape, "im2col": b_im2col, "pool": b_pool, "unpool": b_unpool,
    "chpool": b_chpool, "ch_unpool": b_ch_unpool, "col2im": b_col2im,
    "reduce_axis": b_reduce_axis, "reduce_last": b_reduce_last, "take_grad": b_take_grad,
    "cx_mul_cc": _cx("complex_mul_cc", [(3, 8), (3, 8)]),
    "cx_mul_cr": _cx("complex_mul_cr", [(3, 8), (3, 4)]),
    "cx_mul_rc": _cx("complex_mul_rc", [(3, 4), (3, 8)]),
    "cx_div_cc": _cx("complex_div_cc", [(3, 8), (3, 8)]),
    "cx_div_cr": _cx("complex_div_cr", [(3, 8), (3, 4)]),
    "cx_div_rc": _cx("complex_div_rc", [(3, 4), (3, 8)]),
    "cx_conj": _cx("conj", [(3, 8)]),
    "cx_exchange": _cx("complex_exchange", [(3, 8)]),
    "cx_pad_imag": _cx("complex_pad_imag", [(3, 4)]),
    "cx_abs_square": _cx("complex_abs_square", [(3, 8)]),
    "cx_sum_real_imag": _cx("complex_sum_real_imag", [(3, 8)]),
}


def test_every_reader_row_has_a_builder():
    assert set(BUILDERS) == {r.name for r in READERS}


def _reader_of(node):
    """The reader names of the Gather nodes under ``node``."""
    out = set()
    if type(node) is ir.Gather:
        out.add(node.reader)
    for c in getattr(node, "children", ()):
        out |= _reader_of(c)
    return out


def reader_cases(sources, seed):
    """Every reader row on every dtype its constructor takes, its value sources made by
    ``sources(rng)`` (a function (code, shape) -> tensor or expression)."""
    rng = np.random.RandomState(seed)
    cases = []
    for name, build in BUILDERS.items():
        for code in CODES:
            try:
                e = build(rng, code, sources(rng))
            except (TypeError, ValueError) as err:   # a dtype the extension refuses
                assert code not in ("f32", "f64"), (name, code, err)
                continue
            assert name in _reader_of(e.key), (name, ir.describe(e.key))
            dst = tensor(rng, code, tuple(e.shape))
            saver = ("saveto", "plusto")[rng.randint(2)]
            cases.append(Case(dst, e, saver, f"{name}<{code}>"))
    return cases


def tensors(rng):
    return lambda code, shape: tensor(rng, code, shape)


def elementwise(rng):
    """Element-wise sources: (a * 2 - b), relu, tcast from another dtype, at random."""
    def make(code, shape):
        k = rng.randint(3)
        a, b = tensor(rng, code, shape), tensor(rng, code, shape)
        if k == 0:
            return a * 2 - b
        if k == 1:
            return ms.F("maximum", a, b) + 1
        other = CODES[rng.randint(len(CODES))]
        return ms.tcast(BY_CODE[code].np, tensor(rng, other, shape))
    return make


def gathered(rng):
    """Gathered sources: each a pad or an upsampling of something smaller, or a take."""
    def make(code, shape):
        k = rng.randint(3)
        if k == 0 and len(shape) >= 2 and shape[-1] > 2 and shape[-2] > 2:
            return ms.pad(tensor(rng, code, shape[:-2] + (shape[-2] - 2, shape[-1] - 2)), 1)
        if k == 1 and len(shape) == 2:
            return ms.take(ints(rng, (shape[0],), 0, 3), tensor(rng, code, (3, shape[-1])))
        return ms.F("identity", tensor(rng, code, shape))
    return make


GROUPS = {"tensors": lambda: reader_cases(tensors, 10),
          "elementwise": lambda: reader_cases(elementwise, 11),
          "gathered": lambda: reader_cases(gathered, 12)}


@needs_nvrtc
@pytest.mark.parametrize("group", ["tensors"])
def test_nvrtc_compiles_every_reader(group):
    cases = GROUPS[group]()
    assert {n for c in cases for n in _reader_of(c.node)} == set(BUILDERS)
    assert compile_all([c.k for c in cases]) > 0


@needs_gxx
@pytest.mark.parametrize("group", list(GROUPS))
def test_host_harness_matches_cpu_readers(group):
    run_cases(GROUPS[group]())


# ---- views read in place, and gathers over views ------------------------------------------

def view_cases(seed=13):
    """Affine views (flip, slice, crop, transpose_axes, swapaxis, broadcast, a 1-D slice)
    on every dtype, alone, in element-wise expressions and as 2-D sources of the readers
    that read views in place (take, choose_row, concat, im2col, take_grad)."""
    rng = np.random.RandomState(seed)
    cases = []
    for code in CODES:
        t3 = tensor(rng, code, (3, 4, 5))
        t2 = tensor(rng, code, (6, 5))
        exprs = [
            ms.flip(t3, 0), ms.flip(t3, 2), ms.slice_axis(t3, 1, 1, 3),
            ms.transpose_axes(t3, (2, 0, 1)), ms.swapaxis(t3, 0, 1),
            ms.broadcast_with_axis(t2, 0, 3), ms.crop(t3, (2, 3), 1, 1),
            ms.flip(t3, 1) * 2 + ms.transpose_axes(tensor(rng, code, (5, 3, 4)), (1, 2, 0)),
            ms.slice_axis(tensor(rng, code, (9,)), 0, 2, 7),
            ms.take(ints(rng, (4,), 0, 5), ms.flip(t2, 1)),
            ms.take(ints(rng, (4,), 0, 5), ms.transpose_axes(t2, (1, 0))),
            ms.mat_choose_row_element(ms.flip(t2, 0), ints(rng, (6,), 0, 5)),
            ms.concat(ms.flip(t2, 1), ms.slice_axis(tensor(rng, code, (6, 7)), 1, 1, 4), 1),
            ms.take_grad(ints(rng, (6,), 0, 3), ms.flip(t2, 0), 3),
        ]
        for i, e in enumerate(exprs):
            dst = tensor(rng, code, tuple(e.shape))
            cases.append(Case(dst, e, ("saveto", "minusto")[i % 2], f"view {i}<{code}>"))
    return cases


def _has_view(node):
    return type(node) is ir.View or any(_has_view(c) for c in getattr(node, "children", ()))


@needs_gxx
def test_host_harness_matches_cpu_views():
    cases = view_cases()
    assert sum(_has_view(c.node) for c in cases) == len(cases)
    run_cases(cases)


@needs_nvrtc
def test_nvrtc_compiles_views():
    assert compile_all([c.k for c in view_cases()], ARCHS[:1]) > 0


def test_view_binding():
    a = ms.new_tensor((3, 4, 5), 1.0)
    k = emit(ms.flip(a, 2).key, "f32", "saveto")
    assert k.binding.leaves == (("view", "f32", 2),)
    assert ("L0_map", "ms_cu_view") in k.binding.params and not k.binding.checks
    g = emit(ms.take(ms.new_tensor((2,), 0.0), ms.new_tensor((3, 4), 1.0)).key, "f32", "saveto")
    assert g.binding.leaves == (("gather", "f32", "take"), ("tensor", "f32", False),
                                ("tensor", "f32", False))
    names = [n for n, _ in g.binding.params]
    assert names[4:7] == ["L0_K", "L0_N", "L0_vec0"] and names[-1] == "ms_err"
    assert g.binding.checks
    # one kernel serves every shape and parameter of a structure: none is in the source
    g2 = emit(ms.take(ms.new_tensor((7,), 0.0), ms.new_tensor((9, 2), 1.0)).key, "f32",
              "saveto")
    assert g2 == g


@needs_gxx
def test_index_out_of_range_sets_the_flag():
    """An index out of range: the element gets ZERO and ms_err is set (the launcher raises
    IndexError after the kernel; the CPU raises before any store). In range: flag clear."""
    rng = np.random.RandomState(5)
    src = tensor(rng, "f32", (4, 3))
    idx = ints(rng, (5,), 0, 4)
    e = ms.take(idx, src)
    dst = ms.new_tensor((5, 3), 0.0)
    case = Case(dst, e, "saveto", "take")
    lib = cuda_host.build([case.k])
    out = np.zeros((5, 3), np.float32)
    assert cuda_host.run(lib, case.k, out, case.leaves, []) == 0
    np.asarray(idx)[2] = 4                       # out of range, after the CPU's check
    assert cuda_host.run(lib, case.k, out, case.leaves, []) == 1
    assert (out[2] == 0).all() and (out[[0, 1, 3, 4]] == np.asarray(src)[np.asarray(idx)[[0, 1, 3, 4]]]).all()
    with pytest.raises(IndexError):
        dst[:] = e
    one = ms.one_hot_encode(ints(rng, (3,), 0, 4), 4)
    k1 = Case(ms.new_tensor((3, 4), 0.0), one, "saveto", "one_hot")
    np.asarray(k1.leaves[1])[1] = -1
    out1 = np.zeros((3, 4), np.float32)
    assert cuda_host.run(cuda_host.build([k1.k]), k1.k, out1, k1.leaves, []) == 1



# ---- random nested trees ------------------------------------------------------------------

class NestGen:
    """Random trees of gathers, views and element-wise nodes, each of an exact shape: pad,
    upsample, pool, take, concat, reduce_with_axis and the complex readers over each other,
    flips, and arithmetic between them."""

    def __init__(self, seed):
        self.r = np.random.RandomState(seed)

    def gen(self, code, shape, depth):
        r = self.r
        if depth <= 0:
            return tensor(r, code, shape) if r.randint(4) else ms.flip(
                tensor(r, code, shape), len(shape) - 1)
        h, w = shape[-2], shape[-1]
        lead = shape[:-2]
        k = r.randint(9)
        if k == 0 and h > 2 and w > 2:
            return ms.pad(self.gen(code, lead + (h - 2, w - 2), depth - 1), 1)
        if k == 1 and h % 2 == 0 and w % 2 == 0:
            return ms.upsampling_nearest(self.gen(code, lead + (h // 2, w // 2), depth - 1), 2)
        if k == 2:
            red = RED[r.randint(3)]
            return ms.pool(self.gen(code, lead + (2 * h, 2 * w), depth - 1), 2, 2, 2, 2, red)
        if k == 3 and len(shape) == 2:
            return ms.take(ints(r, (h,), 0, 3), self.gen(code, (3, w), depth - 1))
        if k == 4 and w > 1:
            s = int(r.randint(1, w))
            return ms.concat(self.gen(code, shape[:-1] + (s,), depth - 1),
                             self.gen(code, shape[:-1] + (w - s,), depth - 1), len(shape) - 1)
        if k == 5 and len(shape) == 2:
            red = RED[r.randint(4)]
            return ms.F("identity", ms.reduce_with_axis(
                self.gen(code, (h, 3, w), depth - 1), 1, red))
        if k == 6 and code in FLOAT_CODES and w % 2 == 0:
            return ms.conj(self.gen(code, shape, depth - 1))
        a, b = self.gen(code, shape, depth - 1), self.gen(code, shape, depth - 1)
        return (a * 2 - b) if k % 2 else ms.F("maximum", a, b)

    def case(self, i):
        r = self.r
        code = ("f32", "f64", "f16", "i32", "i8")[r.randint(5)]
        shape = ((int(r.randint(1, 4)), int(r.randint(2, 4)) * 2),
                 (2, int(r.randint(1, 3)) * 2, int(r.randint(1, 4)) * 2))[r.randint(2)]
        e = self.gen(code, shape, int(r.randint(2, 4)))
        if isinstance(e, ms.Tensor):
            e = e * 1
        return Case(tensor(r, code, shape), e, ("saveto", "plusto")[r.randint(2)], f"nest {i}")


def nest_cases(n=30, seed=21):
    g = NestGen(seed)
    return [g.case(i) for i in range(n)]


@needs_gxx
def test_host_harness_matches_cpu_nested_trees():
    cases = nest_cases()
    assert sum(bool(_reader_of(c.node)) for c in cases) >= len(cases) // 2
    run_cases(cases)


@needs_nvrtc
def test_nvrtc_compiles_nested_trees():
    assert compile_all([c.k for c in nest_cases()], ARCHS[:1]) > 0
