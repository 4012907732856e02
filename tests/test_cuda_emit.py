"""The CUDA emitter (mshadow/cuda/lower.py), with no GPU: NVRTC compiles what it emits for
every operator, dtype, saver and cast and for random element-wise trees (sm_90 and sm_80,
--fmad=false), and the host SIMT harness (tests/cuda_host.py) runs the same source on the
CPU and must give the CPU backend's bits, float16 and NaNs included."""
import warnings

import numpy as np
import pytest

import mshadow as ms
from mshadow import engine, ir
from mshadow.cuda import _cuda as cuda   # NVRTC itself, whatever MSHADOW_CUDA says
from mshadow.cuda.lower import emit
from mshadow.dtypes import BY_CODE, DTYPES, FLOAT_CODES
from mshadow.errors import CudaError, UnsupportedNodeError, UntracedOperatorError
from mshadow.ops_table import OPS

import cuda_host

CODES = tuple(d.code for d in DTYPES)
SAVERS = tuple(s.name for s in ir.SAVER_TABLE)
ARCHS = ("sm_90", "sm_80")
BATCH = 40   # sources per NVRTC call: each is whole on its own, helpers guarded


def _nvrtc_missing():
    try:
        cuda.nvrtc_version()
        return None
    except CudaError as e:
        return str(e).splitlines()[0]


NVRTC_MISSING = _nvrtc_missing()
needs_nvrtc = pytest.mark.skipif(NVRTC_MISSING is not None, reason=f"no NVRTC: {NVRTC_MISSING}")
needs_gxx = pytest.mark.skipif(cuda_host.CXX is None, reason="no g++ for the host harness")


@ms.op.define
def axpy(a, b):
    return a * 2.5 + b


@ms.op.define
def soft(a, b):
    return ms.op.where(a > b, ms.op.tanh(a - b), axpy(b, a) / 4)


@ms.op.define
def branchy(a):
    return a if a > 0 else -a   # untraceable: numpy on the CPU only


# ---- inputs ------------------------------------------------------------------------------

_SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 65504.0, 70000.0, -3e9, 5e18,
                     -1e19, 300.7, -200.2, 0.5, -2.5, 1e-6])


def values(rng, code, shape, special=True):
    """Random values of dtype ``code``; floats mix in NaN, infinities, zeros, subnormal,
    overflowing and out-of-integer-range values."""
    dt = BY_CODE[code].np
    if code in FLOAT_CODES:
        v = rng.uniform(-4, 4, size=shape) * 10.0 ** rng.randint(-2, 3, size=shape)
        if special:
            m = rng.rand(*shape) < 0.15
            v[m] = rng.choice(_SPECIAL, size=int(m.sum()))
        with np.errstate(over="ignore"):
            return v.astype(dt)
    info = np.iinfo(dt)
    v = rng.randint(-20, 21, size=shape)
    m = rng.rand(*shape) < 0.2
    v = v.astype(np.int64)
    v[m] = rng.randint(int(info.min), int(info.max), size=int(m.sum()), dtype=np.int64)
    m = rng.rand(*shape) < 0.1
    v[m] = rng.choice([0, -1, 1, int(info.min), int(info.max)], size=int(m.sum()))
    return v.astype(dt)


def tensor(rng, code, shape, special=True):
    """A tensor of ``shape`` (padded rows half the time) holding random values."""
    t = ms.new_tensor(shape, 0, dtype=BY_CODE[code].np, pad=bool(rng.randint(2)))
    np.asarray(t)[...] = values(rng, code, shape, special)
    return t


def scalar(rng, code):
    if code in FLOAT_CODES:
        return float(rng.choice([0.5, -1.5, 3.0, 0.1, 1e-3, 7.25, -0.0]))
    return int(rng.choice([2, 3, 0, 7] + ([] if code == "u8" else [-1])))


# ---- a case: one structure, emitted, run on the CPU and by the harness --------------------

class Case:
    def __init__(self, dst, value, saver, what):
        self.dst, self.value, self.saver, self.what = dst, value, saver, what
        node, leaves, scalars, _, _ = engine._parts(dst, value)
        self.node, self.leaves, self.scalars = node, leaves, scalars
        self.code = ms.dtypes.CODE_BY_DTYPE[np.dtype(dst.dtype)]
        self.k = emit(node, self.code, saver)

    def compare(self, lib):
        """'' when the harness and the CPU backend store the same bits, else what differs."""
        host = np.array(np.asarray(self.dst))   # the old values, contiguous
        self.err = cuda_host.run(lib, self.k, host, self.leaves, self.scalars)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            # (random trees divide integers by zero: the CPU's 0 is what is compared)
            warnings.filterwarnings("ignore", "integer division by zero", RuntimeWarning)
            engine.assign(self.dst, self.value, self.saver)
        cpu = np.asarray(self.dst)
        u = f"u{cpu.itemsize}"
        bad = cpu.view(u) != host.view(u)
        if not bad.any():
            return ""
        i = tuple(np.argwhere(bad)[0])
        return (f"{self.what} ({ir.describe(self.node)}, {self.saver}): {int(bad.sum())} "
                f"differ, first at {i}: cpu {cpu[i]!r} host {host[i]!r}")


def run_cases(cases):
    lib = cuda_host.build([c.k for c in cases])
    bad = [m for m in (c.compare(lib) for c in cases) if m]
    assert not bad, f"{len(bad)} of {len(cases)} cases differ:\n" + "\n".join(bad[:20])


def compile_all(kernels, archs=ARCHS):
    """NVRTC compiles every source, BATCH at a time, for each arch; a failing batch is
    compiled source by source to name the one that fails. (Random trees compile for the
    first arch only: what differs between archs is covered by every operator and reader.)"""
    uniq = list({k.name: k for k in kernels}.values())
    for i in range(0, len(uniq), BATCH):
        chunk = uniq[i:i + BATCH]
        for arch in archs:
            try:
                cubin = cuda.compile_cubin("\n".join(k.source for k in chunk), arch=arch,
                                           options=("--fmad=false",))
            except CudaError:
                for k in chunk:
                    cuda.compile_cubin(k.source, arch=arch, options=("--fmad=false",))
                raise
            assert cubin[:4] == b"\x7fELF"
    return len(uniq)


# ---- the structures ----------------------------------------------------------------------

def operator_cases(seed=0):
    """Every operator on every dtype, its operands leaves (one transposed) and scalars."""
    rng = np.random.RandomState(seed)
    cases = []
    for op in OPS:
        for code in CODES:
            shape = (5, 7)
            args = [tensor(rng, code, shape)]
            if op.arity > 1:
                args.append(tensor(rng, code, shape[::-1]).T)
            if op.arity > 2:
                args.append(scalar(rng, code))
            dst = ms.new_tensor(shape, 0, dtype=BY_CODE[code].np, pad=True)
            cases.append(Case(dst, ms.F(op.name, *args), "saveto", f"{op.name}<{code}>"))
    return cases


def saver_cases(seed=1):
    """Every saver on every dtype, over a 3-D pitched destination."""
    rng = np.random.RandomState(seed)
    cases = []
    for saver in SAVERS:
        for code in CODES:
            shape = (2, 3, 9)
            dst = tensor(rng, code, shape)
            a, b = tensor(rng, code, shape), tensor(rng, code, shape)
            value = ms.F("minus", ms.F("mul", a, scalar(rng, code)), b)
            cases.append(Case(dst, value, saver, f"{saver}<{code}>"))
            cases.append(Case(tensor(rng, code, shape), a, saver, f"{saver}<{code}> leaf"))
    return cases


def cast_cases(seed=2):
    """tcast between every pair of dtypes, specials included (NaN and out-of-range floats
    to integers: x86's answer), and casts inside float16 arithmetic."""
    rng = np.random.RandomState(seed)
    cases = []
    for src in CODES:
        for dst_code in CODES:
            a = tensor(rng, src, (4, 33))
            dst = ms.new_tensor((4, 33), 0, dtype=BY_CODE[dst_code].np)
            cases.append(Case(dst, ms.tcast(BY_CODE[dst_code].np, a), "saveto",
                              f"tcast<{dst_code}>({src})"))
    return cases


def user_op_cases(seed=3):
    rng = np.random.RandomState(seed)
    cases = []
    for code in CODES:
        a, b = tensor(rng, code, (3, 6)), tensor(rng, code, (3, 6))
        dst = ms.new_tensor((3, 6), 0, dtype=BY_CODE[code].np)
        cases.append(Case(dst, ms.F(soft, a, b) + ms.F(axpy, b, a), "plusto", f"user<{code}>"))
    return cases


class TreeGen:
    """Random element-wise trees: leaves (pitched, transposed), scalars, every operator,
    defined operators and tcast to and from other dtypes, to a depth."""

    USER = (axpy, soft)

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)

    def gen(self, code, shape, depth):
        r = self.rng
        k = r.randint(10) if depth > 0 else r.randint(3)
        if k == 0 or (k == 1 and shape[0] == shape[1]):
            return tensor(r, code, shape)
        if k == 1:
            return tensor(r, code, shape[::-1]).T
        if k == 2:
            return scalar(r, code)
        if k == 3:   # a cast from another dtype
            other = CODES[r.randint(len(CODES))]
            return ms.tcast(BY_CODE[code].np, self.node(other, shape, depth - 1))
        if k == 4:
            op = self.USER[r.randint(len(self.USER))]
            return ms.F(op, *[self.node(code, shape, depth - 1) for _ in range(op.arity)])
        op = OPS[r.randint(len(OPS))]
        args = [self.gen(code, shape, depth - 1) for _ in range(op.arity)]
        if all(not isinstance(a, (ms.Tensor, ms.expr.Exp)) for a in args):
            args[0] = tensor(r, code, shape)
        return ms.F(op.name, *args)

    def node(self, code, shape, depth):
        """An operand that is not a bare scalar (tcast and a defined op's arguments)."""
        e = self.gen(code, shape, depth)
        return tensor(self.rng, code, shape) if not isinstance(e, (ms.Tensor, ms.expr.Exp)) else e

    def case(self, i):
        r = self.rng
        code = CODES[r.randint(len(CODES))]
        shape = (int(r.randint(1, 6)), int(r.randint(1, 6)))
        if r.rand() < 0.5:
            shape = (shape[0], shape[0])   # square: transposed leaves of the same shape
        value = self.node(code, shape, int(r.randint(1, 5)))
        dst = tensor(r, code, shape)
        return Case(dst, value, SAVERS[r.randint(len(SAVERS))], f"tree {i}")


def tree_cases(n=300, seed=4):
    g = TreeGen(seed)
    return [g.case(i) for i in range(n)]


GROUPS = {"operators": operator_cases, "savers": saver_cases, "casts": cast_cases,
          "user_ops": user_op_cases, "trees": tree_cases}


# ---- tests -------------------------------------------------------------------------------

@needs_nvrtc
@pytest.mark.parametrize("group", list(GROUPS))
def test_nvrtc_compiles(group):
    assert compile_all([c.k for c in GROUPS[group]()],
                       ARCHS[:1] if group == "trees" else ARCHS) > 0


@needs_gxx
@pytest.mark.parametrize("group", list(GROUPS))
def test_host_harness_matches_cpu(group):
    run_cases(GROUPS[group]())


@needs_gxx
def test_half_conversions_exhaustive():
    """Every half -> float, and float / double -> half on every half, every midpoint between
    neighbours and their neighbours: the emitter's conversions are numpy's (and the CPU's)."""
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    src = ms.new_tensor((256, 256), 0, dtype=np.float16)
    np.asarray(src)[...] = h.reshape(256, 256)
    f32 = ms.new_tensor((256, 256), 0)
    kf = Case(f32, ms.tcast(np.float32, src), "saveto", "f16->f32")
    fin = h[np.isfinite(h)].astype(np.float64)
    fin = np.unique(fin)
    mids = (fin[:-1] + fin[1:]) / 2
    tests = np.concatenate([fin, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                            [np.nan, np.inf, -np.inf, 1e6, -1e-10, 2.0 ** -25, 2.0 ** -24 * 1.5]])
    n = len(tests) // 64 * 64
    cases = [kf]
    for code in ("f32", "f64"):
        t = ms.new_tensor((64, n // 64), 0, dtype=BY_CODE[code].np)
        np.asarray(t)[...] = tests[:n].astype(BY_CODE[code].np).reshape(64, -1)
        out = ms.new_tensor((64, n // 64), 0, dtype=np.float16)
        cases.append(Case(out, ms.tcast(np.float16, t), "saveto", f"{code}->f16"))
    lib = cuda_host.build([c.k for c in cases])
    for c in cases:
        assert c.compare(lib) == ""
    assert np.array_equal(np.asarray(f32).view(np.uint32),
                          h.astype(np.float32).view(np.uint32).reshape(256, 256))


def test_binding_and_name():
    a = ms.new_tensor((3, 4), 1.0)
    b = ms.new_tensor((4, 3), 1.0, dtype=np.float16)
    e = ms.F("plus", a * 2.0, ms.tcast(np.float32, b.T))
    k = emit(e.key, "f32", "plusto")
    assert k.binding.leaves == (("tensor", "f32", False), ("tensor", "f16", True))
    assert k.binding.scalars == (("f32", "f32"),)
    assert [n for n, _ in k.binding.params] == ["rows", "cols", "dst", "dst_pitch", "L0",
                                                "L0_pitch", "s0", "L1", "L1_pitch"]
    assert k.name.startswith("ms_ew_") and f'void {k.name}(' in k.source
    assert emit(e.key, "f32", "plusto") == k            # a pure function of its key
    assert emit(e.key, "f32", "saveto").name != k.name   # named by a hash of the source
    h = ms.new_tensor((3, 4), 1.0, dtype=np.float16)
    k16 = emit((ms.F("exp", h) * h).key, "f16", "saveto")
    assert k16.binding.scalars == () and "ms_s_exp_f32" in k16.source
    assert k16.source.count("ms_float_to_half(") >= 3   # after exp, after mul, the store


def test_unsupported_nodes_raise_typed_errors():
    a = ms.new_tensor((4, 4), 1.0)
    with pytest.raises(UnsupportedNodeError, match="view of an expression.*stage") as ei:
        emit(ms.flip(ms.pad(a, 1), 0).key, "f32", "saveto")     # (the executor stages it)
    assert isinstance(ei.value, NotImplementedError) and ei.value.node is not None
    with pytest.raises(UntracedOperatorError, match="branchy.*GPU"):
        e = ms.F(branchy, a)
        emit(e.key, "f32", "saveto")
    with pytest.raises(ValueError, match="saver"):
        emit(ir.LEAF["f32"], "f32", "nosuch")
    with pytest.raises(UnsupportedNodeError, match="Reduce"):
        emit(ms.sum_rows(a).key, "f32", "saveto")


@needs_nvrtc
def test_implicit_dot_kernels_compile():
    """implicit_dot's inlined k loop, of tensors, .T and views, every type it has: NVRTC."""
    ks = []
    for dt in (np.float32, np.float64, np.uint8, np.int8, np.int32, np.int64):
        a = ms.new_tensor((4, 6), 1, dtype=dt)
        b = ms.new_tensor((6, 5), 1, dtype=dt)
        code = ms.dtypes.as_dtype(dt)
        for e in (ms.implicit_dot(a, b) * 2, ms.implicit_dot(b.T, a.T),
                  ms.implicit_dot(ms.slice_axis(a, 1, 0, 6), ms.broadcast_to(b[0:1], (6, 5)))):
            ks.append(emit(e.key, e.code, "plusto"))
    compile_all(ks)
