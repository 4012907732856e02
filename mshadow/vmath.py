"""The vectorised transcendentals, each written ONCE and compiled for every ISA.

A body is a few lines of a tiny C-like language over the packet vocabulary of
``include/mshadow/packet/*.h``: ``add sub mul div max min abs neg`` and ``fma(a, b, c)`` (a * b + c rounded once) on values,
``lt gt eq isnan`` giving masks, ``sel(m, a, b)`` (a where m is set), ``mor`` (mask or),
``pow2i(n)`` (2**n for an integral n), ``ldexp(p, n)`` (p * 2**n rounded once),
``frexpe``/``frexpm`` (x = m * 2**e, m in [0.5, 1)), ``copysign(a, b)``, ``k(c)`` (a
constant) and calls of the functions defined before it. Float32 bodies also have table
lookups: ``i_j = bucket(v, BASE)`` (which run of 2**22 consecutive floats, half a binade,
v >= 0 is in, counted from the float whose bits are BASE; 0..15 after the caller's clamp) and
``tab(NAME, i_j)`` (entry i_j of the 16 of TABLES[NAME]); both are exact. ``codegen_cpu``
emits each body as ``ms_<isa>_<fn>_<type>`` for isa in s (one scalar), sse2, avx2 and avx512.
The scalar member is what the plain path and the tails of SIMD loops call, so every ISA
level gives the same bits: only IEEE add/sub/mul/div, fused multiply-add and exact bit
manipulations are used, in the same order, and the compiler's own contraction is off. A
fused multiply-add is IEEE 754's fusedMultiplyAdd at every level: one instruction at AVX2
(the level is AVX2 + FMA), AVX-512, NEON and on the GPU (fmaf / fma), C99's fmaf / fma in
the scalar member and, lane by lane, at SSE2 (which has no fused multiply-add). Each Horner
step is one fma: half the operations and one rounding instead of two.

The algorithms are Cephes' (expf, exp, logf, tanh) and fdlibm's (log) with their published
coefficients, and for float32 tanh a polynomial per slice of the argument range (coefficients
fitted by tools/fit_tanhf.py), all branch-free: both sides of a branch are computed and
``sel`` picks. Special values (NaN, +-inf, +-0, subnormals, out-of-range arguments) follow
C99 and numpy; the measured accuracy of each is in docs/accuracy.md and tested.

A line ``name = expr`` declares or updates a value; names starting with ``m_`` are masks,
``i_`` table indices.
The last line is ``return expr``.
"""

# exp: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 = C1 + C2, n * C1 exact), e**r by
# a polynomial, then scaled by ldexp, which rounds once, so results down to the smallest
# subnormal and up to overflow are right. Arguments are clamped to where exp already gives
# 0 or inf, so the scaling exponent stays in range; NaN passes through.
_EXP_F32 = """
xc = min(max(x, k(-104.0)), k(89.0))
n = sub(fma(xc, k(1.44269504088896341), k(12582912.0)), k(12582912.0))
r = fma(n, k(-0.693359375), xc)
r = fma(n, k(2.12194440e-4), r)
z = mul(r, r)
p = fma(r, k(1.9875691500E-4), k(1.3981999507E-3))
p = fma(p, r, k(8.3334519073E-3))
p = fma(p, r, k(4.1665795894E-2))
p = fma(p, r, k(1.6666665459E-1))
p = fma(p, r, k(5.0000001201E-1))
p = add(fma(p, z, r), k(1.0))
return sel(isnan(x), x, ldexp(p, n))
"""

_EXP_F64 = """
xc = min(max(x, k(-746.0)), k(710.0))
n = sub(fma(xc, k(1.4426950408889634073599), k(6755399441055744.0)), k(6755399441055744.0))
r = fma(n, k(-6.93145751953125E-1), xc)
r = fma(n, k(-1.42860682030941723212E-6), r)
z = mul(r, r)
px = fma(z, k(1.26177193074810590878E-4), k(3.02994407707441961300E-2))
px = mul(r, fma(px, z, k(9.99999999999999999910E-1)))
qx = fma(z, k(3.00198505138664455042E-6), k(2.52448340349684104192E-3))
qx = fma(qx, z, k(2.27265548208155028766E-1))
qx = fma(qx, z, k(2.00000000000000000009E0))
p = fma(k(2.0), div(px, sub(qx, px)), k(1.0))
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
p = fma(f, k(7.0376836292E-2), k(-1.1514610310E-1))
p = fma(p, f, k(1.1676998740E-1))
p = fma(p, f, k(-1.2420140846E-1))
p = fma(p, f, k(1.4249322787E-1))
p = fma(p, f, k(-1.6668057665E-1))
p = fma(p, f, k(2.0000714765E-1))
p = fma(p, f, k(-2.4999993993E-1))
p = fma(p, f, k(3.3333331174E-1))
y = mul(mul(p, f), z)
y = fma(e, k(-2.12194440e-4), y)
y = fma(z, k(-0.5), y)
y = fma(e, k(0.693359375), add(f, y))
""" + _LOG_TAIL

_LOG_F64 = _LOG_HEAD.format(tiny="2.2250738585072014e-308", scale="18014398509481984.0",
                            scale_bits="54.0") + """
hfsq = mul(mul(k(0.5), f), f)
s = div(f, add(k(2.0), f))
z = mul(s, s)
w = mul(z, z)
t1 = mul(w, fma(w, fma(w, k(1.531383769920937332e-01), k(2.222219843214978396e-01)), k(3.999999999940941908e-01)))
t2 = mul(z, fma(w, fma(w, fma(w, k(1.479819860511658591e-01), k(1.818357216161805012e-01)), k(2.857142874366239149e-01)), k(6.666666666666735130e-01)))
R = add(t2, t1)
y = sub(mul(e, k(6.93147180369123816490e-01)), sub(sub(hfsq, fma(s, add(hfsq, R), mul(e, k(1.90821492927058770002e-10)))), f))
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

# tanh (float64): |x| < 0.625 by a rational function, above by 1 - 2 / (exp(2|x|) + 1),
# which reaches 1 when exp overflows. x = +-0 returns x.
_TANH_BIG = """
a = abs(x)
ex = exp(add(a, a))
big = sub(k(1.0), div(k(2.0), add(ex, k(1.0))))
big = sel(lt(x, k(0.0)), neg(big), big)
y = sel(lt(a, k(0.625)), small, big)
return sel(eq(x, k(0.0)), x, y)
"""

# tanh (float32), no exp and no division: |x| (clamped to 9.5, where tanh rounds to 1) picks
# one of 16 slices (half binades [0.0390625, 0.0546875), ..., [5, 7), [7, 10); slice 0 also
# takes all below), and tanh(b + t) = c0 + c1 t + t^2 (c2 + ... + c6 t^4) with t = |x| - b,
# exact. The small c1 t and t^2 q terms are added to c0 last, so the result rounds about
# once. Slice 0 has b = c0 = 0, c1 = 1: tiny x and +-0 come back as x. NaN: min(a, 9.5)
# gives 9.5 (a valid index), min(9.5, a) gives NaN, which every later step passes on (every
# NaN operand is that one, so the operand order of add, mul and fma cannot change its
# bits). Tables: TANHF_* below.
_TANH_F32 = """
a = abs(x)
i_j = bucket(max(min(a, k(9.5)), k(0.0390625)), 0x3D200000)
t = sub(min(k(9.5), a), tab(TANHF_B, i_j))
q = fma(tab(TANHF_C6, i_j), t, tab(TANHF_C5, i_j))
q = fma(q, t, tab(TANHF_C4, i_j))
q = fma(q, t, tab(TANHF_C3, i_j))
q = fma(q, t, tab(TANHF_C2, i_j))
y = add(tab(TANHF_C0, i_j), fma(tab(TANHF_C1, i_j), t, mul(t, mul(t, q))))
return copysign(y, x)
"""

_TANH_F64 = """
z = mul(x, x)
p = fma(z, k(-9.64399179425052238628E-1), k(-9.92877231001918586564E1))
p = fma(p, z, k(-1.61468768441708447952E3))
q = add(z, k(1.12811678491632931402E2))
q = fma(q, z, k(2.23548839060100448583E3))
q = fma(q, z, k(4.84406305325125486048E3))
small = add(x, div(mul(mul(x, z), p), q))
""" + _TANH_BIG

# 16-entry float32 tables (tab), as tools/fit_tanhf.py prints them: exact float32 values.
TABLES = {
    "TANHF_B": (
        0.0, 0.06641088426113129, 0.09374244511127472,
        0.13284821808338165, 0.18747158348560333, 0.2656508684158325,
        0.37508606910705566, 0.5313401818275452, 0.7501437664031982,
        1.06247878074646, 1.5003362894058228, 2.124457597732544,
        3.0006678104400635, 4.250577449798584, 6.000398635864258,
        8.252860069274902,
    ),
    "TANHF_C0": (
        0.0, 0.06631342321634293, 0.0934688150882721,
        0.13207216560840607, 0.18530575931072235, 0.2595733404159546,
        0.358432412147522, 0.4864048659801483, 0.6352347135543823,
        0.7866107225418091, 0.9052090048789978, 0.9718426465988159,
        0.9950613379478455, 0.9995936155319214, 0.9999877214431763,
        0.9999998807907104,
    ),
    "TANHF_C1": (
        1.0, 0.995602548122406, 0.9912635684013367,
        0.982556939125061, 0.9656617641448975, 0.9326216578483582,
        0.8715261816978455, 0.7634103298187256, 0.5964768528938293,
        0.3812435567378998, 0.18059656023979187, 0.055521778762340546,
        0.009853077121078968, 0.0008127960609272122, 2.459144343447406e-05,
        2.7159774163010297e-07,
    ),
    "TANHF_C2": (
        -6.461611801178435e-10, -0.06602146476507187, -0.0926523506641388,
        -0.12976844608783722, -0.1789427399635315, -0.24208380281925201,
        -0.3123832941055298, -0.3713264465332031, -0.3789028227329254,
        -0.29989030957221985, -0.1634775996208191, -0.05395827814936638,
        -0.00980434101074934, -0.0008124187588691711, -2.4583358026575297e-05,
        -4.5792961600454873e-07,
    ),
    "TANHF_C3": (
        -0.33333316445350647, -0.328019917011261, -0.3215612769126892,
        -0.3103514313697815, -0.28868138790130615, -0.2479933649301529,
        -0.17851576209068298, -0.07386705279350281, 0.0418652780354023,
        0.10881760716438293, 0.087795689702034, 0.033937469124794006,
        0.0064668492414057255, 0.0005382330855354667, 1.6081765352282673e-05,
        1.7787128570034838e-07,
    ),
    "TANHF_C4": (
        -1.4239982192520984e-05, 0.034568872302770615, 0.06296484917402267,
        0.0844390019774437, 0.11337070167064667, 0.14522425830364227,
        0.1681804358959198, 0.15968084335327148, 0.09971201419830322,
        0.014374153688549995, -0.02497730404138565, -0.014998624101281166,
        -0.003170221811160445, -0.00026885702391155064, -8.056508704612497e-06,
        2.2664534071736853e-07,
    ),
    "TANHF_C5": (
        0.13385605812072754, 3.2187376022338867, -0.5309407711029053,
        0.07225054502487183, 0.05841730535030365, 0.05041282996535301,
        0.013617228716611862, -0.03471669182181358, -0.06360380351543427,
        -0.03916106000542641, -0.0030725242104381323, 0.004411378875374794,
        0.0012555420398712158, 0.0001178552774945274, 3.851751898764633e-06,
        4.326970781676209e-08,
    ),
    "TANHF_C6": (
        -0.008704113774001598, 51.60254669189453, -6.654244422912598,
        -0.33963796496391296, -0.2416532039642334, -0.12489782273769379,
        -0.08184131234884262, -0.04225500300526619, -0.0014847710262984037,
        0.01896771229803562, 0.007250072434544563, -0.00048166821943596005,
        -0.00037941598566249013, -3.881866723531857e-05, -1.2742453918690444e-06,
        -1.48398143551276e-07,
    ),
}

# (name, arity, {type code: body}), in dependency order.
FUNCTIONS = (
    ("exp", 1, {"f32": _EXP_F32, "f64": _EXP_F64}),
    ("log", 1, {"f32": _LOG_F32, "f64": _LOG_F64}),
    ("log1p", 1, {"f32": _LOG1P, "f64": _LOG1P}),
    ("tanh", 1, {"f32": _TANH_F32, "f64": _TANH_F64}),
)
