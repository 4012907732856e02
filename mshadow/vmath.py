"""The vectorised transcendentals, each written ONCE and compiled for every ISA.

A body is a few lines of a tiny C-like language over the packet vocabulary of
``include/mshadow/packet/*.h``: ``add sub mul div max min abs neg`` on values,
``lt gt eq isnan`` giving masks, ``sel(m, a, b)`` (a where m is set), ``mor`` (mask or),
``pow2i(n)`` (2**n for an integral n), ``ldexp(p, n)`` (p * 2**n rounded once),
``frexpe``/``frexpm`` (x = m * 2**e, m in [0.5, 1)), ``copysign(a, b)``, ``k(c)`` (a
constant) and calls of the functions defined before it. ``codegen_cpu`` emits
each body as ``ms_<isa>_<fn>_<type>`` for isa in s (one scalar), sse2, avx2 and avx512.
The scalar member is what the plain path and the tails of SIMD loops call, so every ISA
level gives the same bits: only IEEE add/sub/mul/div and exact bit manipulations are used,
in the same order, and FMA contraction is off.

The algorithms are Cephes' (expf, exp, logf, tanhf, tanh) and fdlibm's (log), with their
published coefficients, made branch-free: both sides of a branch are computed and ``sel``
picks. Special values (NaN, +-inf, +-0, subnormals, out-of-range arguments) follow C99
and numpy; the measured accuracy of each is in docs/accuracy.md and tested.

A line ``name = expr`` declares or updates a value; names starting with ``m_`` are masks.
The last line is ``return expr``.
"""

# exp: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 = C1 + C2, n * C1 exact), e**r by
# a polynomial, then scaled by ldexp, which rounds once, so results down to the smallest
# subnormal and up to overflow are right. Arguments are clamped to where exp already gives
# 0 or inf, so the scaling exponent stays in range; NaN passes through.
_EXP_F32 = """
xc = min(max(x, k(-104.0)), k(89.0))
n = sub(add(mul(xc, k(1.44269504088896341)), k(12582912.0)), k(12582912.0))
r = sub(sub(xc, mul(n, k(0.693359375))), mul(n, k(-2.12194440e-4)))
z = mul(r, r)
p = add(mul(r, k(1.9875691500E-4)), k(1.3981999507E-3))
p = add(mul(p, r), k(8.3334519073E-3))
p = add(mul(p, r), k(4.1665795894E-2))
p = add(mul(p, r), k(1.6666665459E-1))
p = add(mul(p, r), k(5.0000001201E-1))
p = add(add(mul(p, z), r), k(1.0))
return sel(isnan(x), x, ldexp(p, n))
"""

_EXP_F64 = """
xc = min(max(x, k(-746.0)), k(710.0))
n = sub(add(mul(xc, k(1.4426950408889634073599)), k(6755399441055744.0)), k(6755399441055744.0))
r = sub(sub(xc, mul(n, k(6.93145751953125E-1))), mul(n, k(1.42860682030941723212E-6)))
z = mul(r, r)
px = add(mul(z, k(1.26177193074810590878E-4)), k(3.02994407707441961300E-2))
px = mul(r, add(mul(px, z), k(9.99999999999999999910E-1)))
qx = add(mul(z, k(3.00198505138664455042E-6)), k(2.52448340349684104192E-3))
qx = add(mul(qx, z), k(2.27265548208155028766E-1))
qx = add(mul(qx, z), k(2.00000000000000000009E0))
p = add(k(1.0), mul(k(2.0), div(px, sub(qx, px))))
return sel(isnan(x), x, ldexp(p, n))
"""

# log: x = m * 2**e with m in [sqrt(1/2), sqrt(2)), f = m - 1. Subnormals are scaled into
# the normal range first; x < 0 gives NaN, 0 gives -inf, inf stays inf, NaN passes through.
_LOG_HEAD = """
m_sub = lt(x, k({tiny}))
xs = sel(m_sub, mul(x, k({scale})), x)
e = sub(frexpe(xs), sel(m_sub, k({scale_bits}), k(0.0)))
m = frexpm(xs)
m_lo = lt(m, k(0.707106781186547524))
e = sel(m_lo, sub(e, k(1.0)), e)
f = sub(sel(m_lo, add(m, m), m), k(1.0))
"""
_LOG_TAIL = """
y = sel(lt(x, k(0.0)), k(NAN), y)
y = sel(eq(x, k(0.0)), k(-INFINITY), y)
y = sel(eq(x, k(INFINITY)), x, y)
return sel(isnan(x), x, y)
"""

_LOG_F32 = _LOG_HEAD.format(tiny="1.17549435e-38", scale="33554432.0", scale_bits="25.0") + """
z = mul(f, f)
p = add(mul(f, k(7.0376836292E-2)), k(-1.1514610310E-1))
p = add(mul(p, f), k(1.1676998740E-1))
p = add(mul(p, f), k(-1.2420140846E-1))
p = add(mul(p, f), k(1.4249322787E-1))
p = add(mul(p, f), k(-1.6668057665E-1))
p = add(mul(p, f), k(2.0000714765E-1))
p = add(mul(p, f), k(-2.4999993993E-1))
p = add(mul(p, f), k(3.3333331174E-1))
y = mul(mul(p, f), z)
y = add(y, mul(e, k(-2.12194440e-4)))
y = add(y, mul(z, k(-0.5)))
y = add(add(f, y), mul(e, k(0.693359375)))
""" + _LOG_TAIL

_LOG_F64 = _LOG_HEAD.format(tiny="2.2250738585072014e-308", scale="18014398509481984.0",
                            scale_bits="54.0") + """
hfsq = mul(mul(k(0.5), f), f)
s = div(f, add(k(2.0), f))
z = mul(s, s)
w = mul(z, z)
t1 = mul(w, add(k(3.999999999940941908e-01), mul(w, add(k(2.222219843214978396e-01), mul(w, k(1.531383769920937332e-01))))))
t2 = mul(z, add(k(6.666666666666735130e-01), mul(w, add(k(2.857142874366239149e-01), mul(w, add(k(1.818357216161805012e-01), mul(w, k(1.479819860511658591e-01))))))))
R = add(t2, t1)
y = sub(mul(e, k(6.93147180369123816490e-01)), sub(sub(hfsq, add(mul(s, add(hfsq, R)), mul(e, k(1.90821492927058770002e-10)))), f))
""" + _LOG_TAIL

# log1p(x) = log(u) - ((u - 1) - x) / u with u = 1 + x: the division restores what the
# rounding of u lost. u = 0 or inf: log(u) itself; x = +-0 returns x (keeps the sign).
_LOG1P = """
u = add(k(1.0), x)
lu = log(u)
y = sub(lu, div(sub(sub(u, k(1.0)), x), u))
y = sel(mor(eq(u, k(0.0)), eq(u, k(INFINITY))), lu, y)
return sel(eq(x, k(0.0)), x, y)
"""

# tanh: |x| < 0.625 by an odd polynomial (f32) or rational function (f64); above, by
# 1 - 2 / (exp(2|x|) + 1), which reaches 1 when exp overflows. x = +-0 returns x.
_TANH_BIG = """
a = abs(x)
ex = exp(add(a, a))
big = sub(k(1.0), div(k(2.0), add(ex, k(1.0))))
big = sel(lt(x, k(0.0)), neg(big), big)
y = sel(lt(a, k(0.625)), small, big)
return sel(eq(x, k(0.0)), x, y)
"""

_TANH_F32 = """
z = mul(x, x)
p = add(mul(z, k(-5.70498872745E-3)), k(2.06390887954E-2))
p = add(mul(p, z), k(-5.37397155531E-2))
p = add(mul(p, z), k(1.33314422036E-1))
p = add(mul(p, z), k(-3.33332819422E-1))
small = add(mul(mul(p, z), x), x)
""" + _TANH_BIG

_TANH_F64 = """
z = mul(x, x)
p = add(mul(z, k(-9.64399179425052238628E-1)), k(-9.92877231001918586564E1))
p = add(mul(p, z), k(-1.61468768441708447952E3))
q = add(z, k(1.12811678491632931402E2))
q = add(mul(q, z), k(2.23548839060100448583E3))
q = add(mul(q, z), k(4.84406305325125486048E3))
small = add(x, div(mul(mul(x, z), p), q))
""" + _TANH_BIG

# (name, arity, {type code: body}), in dependency order.
FUNCTIONS = (
    ("exp", 1, {"f32": _EXP_F32, "f64": _EXP_F64}),
    ("log", 1, {"f32": _LOG_F32, "f64": _LOG_F64}),
    ("log1p", 1, {"f32": _LOG1P, "f64": _LOG1P}),
    ("tanh", 1, {"f32": _TANH_F32, "f64": _TANH_F64}),
)
