"""The GPU path end to end on the emulated device: random element-wise assignments emitted by
mshadow.cuda.lower.emit, compiled by the emulated compile_cubin, their leaves and destination
in pitched emulated Memory, launched through Module / Function.launch with the launch of
mshadow.cuda.launch, must store the CPU backend's bits (float16, NaNs and infinities
included). This is how an ms.gpu assignment binds a kernel (see bind_launch)."""
import warnings

import numpy as np
import pytest

import mshadow as ms
from mshadow import engine, ir
from mshadow.cuda import emulate, launch
from mshadow.cuda.emulate import Memory, Module, as_arg, compile_cubin
from mshadow.cuda.lower import emit
from mshadow.dtypes import BY_CODE, DTYPES, FLOAT_CODES, CODE_BY_DTYPE
from mshadow.ops_table import OPS

pytestmark = pytest.mark.skipif(emulate.compiler() is None,
                                reason="no g++: the emulated device compiles kernels with it")

CODES = tuple(d.code for d in DTYPES)
SAVERS = tuple(s.name for s in ir.SAVER_TABLE)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 65504.0, 7e4, -3e9, 0.5, -2.5])


def values(rng, code, shape):
    dt = BY_CODE[code].np
    if code in FLOAT_CODES:
        v = rng.uniform(-4, 4, size=shape) * 10.0 ** rng.randint(-2, 3, size=shape)
        m = rng.rand(*shape) < 0.15
        v[m] = rng.choice(SPECIAL, size=int(m.sum()))
        with np.errstate(over="ignore"):
            return v.astype(dt)
    info = np.iinfo(dt)
    v = rng.randint(-20, 21, size=shape).astype(np.int64)
    m = rng.rand(*shape) < 0.2
    v[m] = rng.randint(int(info.min), int(info.max), size=int(m.sum()), dtype=np.int64)
    return v.astype(dt)


def tensor(rng, code, shape):
    t = ms.new_tensor(shape, 0, dtype=BY_CODE[code].np, pad=bool(rng.randint(2)))
    np.asarray(t)[...] = values(rng, code, shape)
    return t


def tree(rng, code, shape, depth):
    """A random element-wise expression: leaves (pitched, transposed), scalars, every
    operator, casts from other dtypes."""
    k = rng.randint(7) if depth > 0 else rng.randint(3)
    if k == 0 or (k == 1 and shape[0] != shape[1] and rng.rand() < 0.5):
        return tensor(rng, code, shape)
    if k == 1:
        return tensor(rng, code, shape[::-1]).T
    if k == 2:
        if code in FLOAT_CODES:
            return float(rng.choice([0.5, -1.5, 3.0, 1e-3, -0.0]))
        return int(rng.choice([2, 3, 0, 7]))
    if k == 3:
        other = CODES[rng.randint(len(CODES))]
        return ms.tcast(BY_CODE[code].np, operand(rng, other, shape, depth - 1))
    op = OPS[rng.randint(len(OPS))]
    args = [tree(rng, code, shape, depth - 1) for _ in range(op.arity)]
    if not any(isinstance(a, (ms.Tensor, ms.expr.Exp)) for a in args):
        args[0] = tensor(rng, code, shape)
    return ms.F(op.name, *args)


def operand(rng, code, shape, depth):
    e = tree(rng, code, shape, depth)
    return e if isinstance(e, (ms.Tensor, ms.expr.Exp)) else tensor(rng, code, shape)


def rows2d(a):
    """A CPU tensor's (or array's) 2-D rows view: every leading axis a row."""
    a = np.asarray(a)
    return a.reshape(-1, a.shape[-1]) if a.ndim != 2 else a


def upload(a):
    """A 2-D host array with contiguous rows -> (pitched emulated Memory holding it, its
    pitch in elements): what an ms.gpu tensor will be."""
    isz = a.dtype.itemsize
    m = Memory.pitched(a.shape[1] * isz, a.shape[0], min(max(isz, 4), 16))
    m.copy_from_host(a)
    assert m.pitch % isz == 0
    return m, m.pitch // isz


def bind_launch(k, dst, leaves, scalars):
    """The arguments of emitted kernel ``k`` (lower.Binding, parameters by name): the
    destination and every tensor leaf as pitched Memory with its pitch in elements, the
    extents as np.int64, each scalar rounded to its storage type and passed as its compute
    type. Returns (args, the destination's Memory)."""
    named = {"rows": dst.shape[0], "cols": dst.shape[1]}
    named["dst"], named["dst_pitch"] = upload(dst)
    for i, (obj, b) in enumerate(zip(leaves, k.binding.leaves)):
        assert b.kind == "tensor"                 # (element-wise: views and gathers later)
        named[f"L{i}"], named[f"L{i}_pitch"] = upload(rows2d(obj))
    for i, (v, (store, comp)) in enumerate(zip(scalars, k.binding.scalars)):
        named[f"s{i}"] = np.asarray(v).astype(BY_CODE[store].np).astype(BY_CODE[comp].np)
    args = [named[n] if isinstance(named[n], Memory) else as_arg(t, named[n])
            for n, t in k.binding.params]
    return args, named["dst"]


def cases(seed, n):
    rng = np.random.RandomState(seed)
    out = []
    for i in range(n):
        code = CODES[rng.randint(len(CODES))]
        shape = (int(rng.randint(1, 13)), int(rng.randint(1, 40)))
        if rng.rand() < 0.3:
            shape = (shape[0], shape[0])
        value = operand(rng, code, shape, int(rng.randint(1, 5)))
        out.append((tensor(rng, code, shape), value, SAVERS[rng.randint(len(SAVERS))]))
    return out


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_assignments_store_the_cpu_backends_bits(seed):
    limits = emulate.device_attributes(0)
    limits = launch.Limits(limits["max_grid_dim"][0], limits["max_grid_dim"][1],
                           limits["max_threads_per_block"], limits["multiprocessor_count"])
    work = []
    for dst, value, saver in cases(seed, 20):
        node, leaves, scalars, _, _ = engine._parts(dst, value)
        code = CODE_BY_DTYPE[np.dtype(dst.dtype)]
        work.append((dst, value, saver, node, emit(node, code, saver), leaves, scalars))
    # one image for the batch (each emitted source stands alone; their helpers are guarded)
    uniq = {w[4].name: w[4].source for w in work}
    module = Module(compile_cubin("\n".join(uniq.values()), options=("--fmad=false",)))
    bad = []
    for dst, value, saver, node, k, leaves, scalars in work:
        host = np.array(rows2d(dst))               # the old values (savers read them)
        args, ddst = bind_launch(k, host, leaves, scalars)
        geo = launch.elementwise(host.shape[0], host.shape[1], limits)
        module.get_function(k.name).launch(geo.grid, geo.block, args)
        ddst.copy_to_host(host)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "integer division by zero", RuntimeWarning)
            engine.assign(dst, value, saver)
        cpu = rows2d(dst)
        u = f"u{cpu.itemsize}"
        if not np.array_equal(cpu.view(u), host.view(u)):
            i = tuple(np.argwhere(cpu.view(u) != host.view(u))[0])
            bad.append(f"{ir.describe(node)} {saver} <{dst.dtype}>: first at {i}: cpu "
                       f"{cpu[i]!r} emulated {host[i]!r}")
    assert not bad, "\n".join(bad)
