"""Fits the float32 tanh tables of mshadow/vmath.py (TANHF_*) and checks them.

    python tools/fit_tanhf.py            # prints the tables (paste into vmath.py) and the error

|x| is cut into 16 slices by bucket(), runs of 2**22 consecutive floats (half a binade):
[7, 10), [5, 7), [3.5, 5), ... down to [0.0390625, 0.0546875), and all below in slice 0. On
slice k, tanh(b + t) ~ c0 + c1 t + t^2 (c2 + c3 t + c4 t^2 + c5 t^3 + c6 t^4) with
t = |x| - b (exact: b is within a factor 2 of |x|), evaluated in float32 as vmath.py does.
b is a float near the slice's middle where tanh(b) rounds to float32 with almost no error
(c0 = that float, so c0 adds none); slice 0 has b = 0, c0 = 0, c1 = 1. The coefficients are
fitted one at a time, each rounded to float32 before the next is fitted to what is left
(minimax of the relative error, Lawson's iteration), against a long double tanh. Needs only
numpy with an 80-bit long double (x86-64 Linux).

Why 16 slices of degree 6: 32 quarter-binade slices of degree 5 are as accurate (0.73 ulp)
and 17% faster on AVX-512, but a 32-entry lookup costs AVX2 four permutes and three blends
where 16 entries cost two and one, and AVX2's tanh ran 1.45x slower than the exp-based one
it replaced.
"""
import numpy as np

LD, F32 = np.longdouble, np.float32
BASE = 0x3D200000      # bits of 0.0390625: slice 0 starts here (and takes everything below)
NT, SHIFT = 16, 22     # slices; bucket() = (bits(|x|) - BASE) >> SHIFT
TOP = F32(9.5)         # |x| is clamped here: tanh(9.5) rounds to 1, as tanh of anything above
DEG = 6                # c0 .. c6


def _f(bits):
    return np.array(bits, np.uint32).view(F32)


def _lawson(V, y, w, iters=40):
    """c minimising max |w * (V c - y)| (iteratively reweighted least squares)."""
    u = np.full(len(y), 1.0 / len(y))
    for _ in range(iters):
        sw = np.sqrt(u) * w
        c = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)[0]
        u = u * np.abs(w * (V @ c - y))
        u /= u.sum()
    return c


def fit_slice(k):
    lo = float(_f(BASE + (k << SHIFT))) if k else 0.0
    hi = float(TOP) if k == NT - 1 else float(_f(BASE + ((k + 1) << SHIFT)))
    a = lo + (hi - lo) * (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, 4000)))
    if k == 0:
        b, c = F32(0), [F32(0), F32(1)]
    else:
        mid = F32((lo + hi) / 2)
        cand = _f(mid.view(np.uint32).astype(np.int64) + np.arange(-3000, 3000))
        cand = cand[(cand >= lo) & (cand < hi)]
        th = np.tanh(cand.astype(LD))
        miss = np.abs(th - th.astype(F32)) / np.spacing(th.astype(F32)).astype(LD)
        b = cand[np.argmin(miss)]
        c = [F32(np.tanh(LD(b)))]
    t = a.astype(LD) - LD(b)
    ref = np.tanh(a.astype(LD))
    w = (1 / np.where(ref > 0, ref, 1)).astype(np.float64)
    while len(c) <= DEG:
        m = len(c)
        rest = ref - sum(LD(c[j]) * t ** j for j in range(m))
        V = np.stack([t ** j for j in range(m, DEG + 1)], 1).astype(np.float64)
        c.append(F32(_lawson(V, rest.astype(np.float64), w)[0]))
    return b, c


def tables():
    rows = [fit_slice(k) for k in range(NT)]
    out = {"TANHF_B": [r[0] for r in rows]}
    for j in range(DEG + 1):
        out[f"TANHF_C{j}"] = [r[1][j] for r in rows]
    return {n: np.array(v, F32) for n, v in out.items()}


def fma32(a, b, c):
    """float32 a * b + c rounded once, as vmath.py's fma: in float64 the product is exact,
    the sum is rounded to odd (TwoSum's error sets the last bit), then rounded to float32
    (scalar.h's ms_fmaf_exact)."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    q = np.asarray(c, np.float64)
    s = p + q
    v = s - p
    e = (p - (s - v)) + (q - v)
    u = s.view(np.uint64)
    below = ((u ^ e.view(np.uint64)) >> np.uint64(63)).astype(np.uint64)
    odd = (u - below) | np.uint64(1)
    return np.where((e != 0) & (e == e), odd, u).view(np.float64).astype(F32)


def tanhf(x, T):
    """vmath.py's float32 tanh, in numpy float32 (the same operations in the same order; min
    as the packets take it, a < b ? a : b, so NaN clamps the index and passes through t)."""
    x = np.asarray(x, F32)
    a = np.abs(x)
    i = (np.maximum(np.where(a < TOP, a, TOP), _f(BASE)).view(np.uint32) - np.uint32(BASE)) >> SHIFT
    t = np.where(TOP < a, TOP, a) - T["TANHF_B"][i]
    q = T[f"TANHF_C{DEG}"][i]
    for j in range(DEG - 1, 1, -1):
        q = fma32(q, t, T[f"TANHF_C{j}"][i])
    y = T["TANHF_C0"][i] + fma32(T["TANHF_C1"][i], t, t * (t * q))
    return np.copysign(y, x)


def main():
    T = tables()
    for name, v in T.items():
        print(f'    "{name}": (')
        for r in range(0, NT, 3):
            print("        " + " ".join(f"{float(e)!r}," for e in v[r:r + 3]))
        print("    ),")
    rng = np.random.default_rng(1)
    x = np.concatenate([_f(rng.integers(0, F32(10).view(np.uint32), 4_000_000)),
                        rng.uniform(-10, 10, 4_000_000).astype(F32)])
    ref = np.tanh(x.astype(LD))
    ulp = np.spacing(np.abs(ref).astype(F32)).astype(LD)
    err = np.abs(tanhf(x, T).astype(LD) - ref) / ulp
    print(f"# max error {float(err.max()):.3f} ulp at {x[np.argmax(err)]!r} "
          f"({len(x)} points)")


if __name__ == "__main__":
    main()
