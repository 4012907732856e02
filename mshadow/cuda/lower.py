"""CUDA lowering: an IR node (element-wise, gathers, views, reductions) -> the CUDA C of one
kernel. Pure Python.

Design:
    Input is what keys a compiled plan: the IR node (mshadow/ir.py), the destination's
    storage code and the saver (ir.SAVER_TABLE). Output is CUDA C text, the kernel's name (a
    hash of the text) and its Binding (which tensor and scalar each parameter takes). The
    emitter reads the IR and the tables only: ops_table (each operator's C form, its
    composite, whether it is float-only), dtypes (C types, compute types), vmath (the
    transcendentals' bodies) and the saver table. It never reads what the CPU lowering made.

    Each node's per-element Eval(y, x) is inlined into one loop body: a leaf is a load at
    (y, x), or (x, y) when transposed, each leaf with its own row pitch; a scalar is a kernel
    parameter of its compute type; an operator is its ops_table C form on the compute type;
    a defined operator (mshadow/op.py UserOp) is its traced body, inlined. The kernel walks
    the rows x cols range with a grid-stride loop in both dimensions (blockIdx.y over rows,
    blockIdx.x * blockDim.x + threadIdx.x over columns), so any grid within the device's
    limits covers it.

    Same bits as the CPU (compile with --fmad=false, the defaults of --prec-div,
    --prec-sqrt and --ftz): the operators are the same C expressions in the same order;
    exp, log, log1p and tanh are the vmath bodies (their scalar member, as the CPU's plain
    path runs them); float16 is computed in float and rounded to half after every operator
    (mshadow's half_t), by conversions written here (NVRTC ships no cuda_fp16.h) with the
    rounding of include/mshadow/half.h; float -> integer conversions that C leaves undefined
    (NaN, out of range) give what x86's cvtt instructions give (the integer's minimum; a
    narrower type then keeps the low bits of the int32 result), as the CPU kernels do.

    A Gather is its readers-table row (mshadow/readers.py) inlined per element, LD and IDX
    of each source a lambda evaluating that source's node where it is read (a fusion: no
    scratch); a View read in place is its row map (_stages.pxi _bind_view_at) passed as an
    ms_cu_view. Parameters, shapes and maps are kernel arguments (Binding), never source.

    A reduction (ir.Reduce, emit_reduce) is a kernel of its own: a block an output element,
    its threads folding the source (inlined as above), then its warps by shuffles. Softmax
    over rows (emit_softmax) is one too, in the CPU kernel's summation order, and so are
    the uniform and gaussian samplers (emit_random: Philox4x32-10, counter-based).

    Not handled yet (UnsupportedNodeError names the node): a View of an expression,
    ImplicitDot and products (they need stages: a later step). A defined
    operator that could not be traced runs on numpy on the CPU only: UntracedOperatorError.

Every helper the source needs sits in its own #ifndef block, so several emitted sources can
be concatenated into one translation unit (the host test harness does).
"""
import hashlib
import re
import struct
from collections import namedtuple

import numpy as np

from .. import ir, vmath
from ..dtypes import BY_CODE, FLOAT_CODES, compute_code
from ..errors import UnsupportedNodeError, UntracedOperatorError
from ..ops_table import OPS_BY_NAME
from ..readers import READERS_BY_NAME, REDUCER_BY_NAME, REDUCER_TABLE

__all__ = ["emit", "emit_reduce", "view_map", "emit_softmax", "emit_softmax_grad",
           "emit_softmax_axis1", "emit_scatter_rows", "emit_sort_keys",
           "emit_sort_count", "emit_sort_scan", "emit_sort_scatter", "emit_gather_1d", "emit_random", "REDUCE_BLOCK", "SOFTMAX_LANES", "Binding", "Bound", "Emitted", "KERNEL_PREFIX", "VIEW_MAXDIM"]

KERNEL_PREFIX = "ms_ew_"
VIEW_MAXDIM = 7   # leading axes a view maps (MS_VIEW_MAXDIM of include/mshadow/plan_exec.h)

# What a launcher passes, in kernel parameter order after (rows, cols, dst, dst_pitch).
# ``leaves``: one Bound per item of the expression's leaves (ir.leaves order), each binding
# the parameters named L<k>...:
#   Bound("tensor", code, transposed)  L<k> its pointer, L<k>_pitch its row pitch in elements
#                                      (of its 2-D flattening: rows of every leading axis)
#   Bound("view", code, step)          a ViewLeaf read in place: L<k> its first element,
#                                      L<k>_map an ms_cu_view (by value): nmap, colstep and
#                                      per mapped axis mdiv, mmod, mstride, as _stages.pxi
#                                      _bind_view_at binds a view, strides in elements
#   Bound("gather", code, reader)      a GatherArgs: L<k>_<param> (long long) per parameter
#                                      of the reader row, in its order, and L<k>_vec<j>
#                                      (int) per source j: 1 when that source is 1-D (read one
#                                      element a row, as GatherArgs binds it), else 0
# ``scalars``: per scalar (storage code, compute code) its value s<k>, rounded to the storage
# type and passed as the compute type (a float16 scalar is a float holding what a half
# holds). ``checks``: the kernel takes a last parameter ``int *ms_err``, set to 1 when a
# gather meets an index out of range (zero it before the launch; the launcher raises
# IndexError when it reads 1). ``params`` is the whole list as (name, C type).
# ``in_place``: the positions of the tensor leaves read at the very element the kernel
# writes, (y, x), untransposed: not through a gather's source or as a product operand, whose
# positions are remapped (so a launcher may run in place over a destination that such a
# leaf is, and must not for any other leaf over it).
Bound = namedtuple("Bound", "kind code detail")
Binding = namedtuple("Binding", "leaves scalars params checks in_place")
Emitted = namedtuple("Emitted", "source name binding")

_CTYPE = {d.code: d.ctype for d in BY_CODE.values()}
_INT_MIN = {"i8": "INT32", "u8": "INT32", "i32": "INT32", "i64": "INT64"}

# ---- helpers: each a guarded block of the prelude ------------------------------------------

_STDINT = """typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;"""

# bit casts: CUDA's intrinsics (the host harness's shim defines them with memcpy)
_BITS = """#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
static __device__ __forceinline__ uint32_t ms_f32_bits(float f) { return __float_as_uint(f); }
static __device__ __forceinline__ float ms_bits_f32(uint32_t u) { return __uint_as_float(u); }
static __device__ __forceinline__ uint64_t ms_f64_bits(double d) {
  return (uint64_t)__double_as_longlong(d); }
static __device__ __forceinline__ double ms_bits_f64(uint64_t u) {
  return __longlong_as_double((long long)u); }"""

# float16 <-> float32 / float64: round to nearest even, NaN kept a NaN with its payload's
# top bits, subnormals exact; the same results as include/mshadow/half.h (and numpy's).
_HALF = """static __device__ __forceinline__ float ms_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) bits = sign | 0x7f800000u | (man << 13);
  else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (man << 13);
  else if (man != 0) {
    exp = 113;
    while ((man & 0x400u) == 0) { man <<= 1; exp--; }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  } else bits = sign;
  return ms_bits_f32(bits);
}
static __device__ __forceinline__ uint16_t ms_float_to_half(float f) {
  const uint32_t x = ms_f32_bits(f);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const uint32_t fexp = x & 0x7f800000u;
  uint32_t fman = x & 0x007fffffu;
  if (fexp >= 0x47800000u) {
    if (fexp == 0x7f800000u && fman) {
      const uint16_t m = (uint16_t)(fman >> 13);
      return (uint16_t)(sign | 0x7c00u | (m ? m : 1u));
    }
    return (uint16_t)(sign | 0x7c00u);
  }
  if (fexp <= 0x38000000u) {
    if (fexp < 0x33000000u) return sign;
    const uint32_t shift = 126u - (fexp >> 23);
    fman |= 0x00800000u;
    uint32_t m = fman >> shift;
    const uint32_t rem = fman & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1u))) m++;
    return (uint16_t)(sign | m);
  }
  uint32_t h = ((fexp - 0x38000000u) >> 13) | (fman >> 13);
  const uint32_t rem = fman & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}
static __device__ __forceinline__ uint16_t ms_double_to_half(double d) {
  const uint64_t x = ms_f64_bits(d);
  const uint16_t sign = (uint16_t)((x >> 48) & 0x8000u);
  const uint64_t dexp = (x >> 52) & 0x7ffu, dman = x & 0xfffffffffffffull;
  if (dexp == 0x7ffu) {
    if (dman) {
      const uint16_t m = (uint16_t)(dman >> 42);
      return (uint16_t)(sign | 0x7c00u | (m ? m : 1u));
    }
    return (uint16_t)(sign | 0x7c00u);
  }
  const int e = (int)dexp - 1023;
  if (e >= 16) return (uint16_t)(sign | 0x7c00u);
  if (e < -25) return sign;
  const uint64_t m = dman | (1ull << 52);
  const int shift = e >= -14 ? 42 : 28 - e;
  uint64_t q = m >> shift;
  const uint64_t rem = m & ((1ull << shift) - 1), halfway = 1ull << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) q++;
  return (uint16_t)(sign | (e >= -14 ? (uint16_t)((uint32_t)(e + 14) << 10) + q : q));
}"""

# The vmath primitives on one value (the scalar member of include/mshadow/packet/: the same
# arithmetic, so the bodies give the same bits). T: the type, U: its bits, ms_bits_t.
_VMATH_PRIMS = """static __device__ __forceinline__ T ms_s_add_t(T a, T b) { return a + b; }
static __device__ __forceinline__ T ms_s_sub_t(T a, T b) { return a - b; }
static __device__ __forceinline__ T ms_s_mul_t(T a, T b) { return a * b; }
static __device__ __forceinline__ T ms_s_div_t(T a, T b) { return a / b; }
static __device__ __forceinline__ T ms_s_fma_t(T a, T b, T c) { return FMA(a, b, c); }
static __device__ __forceinline__ T ms_s_max_t(T a, T b) { return a > b ? a : b; }
static __device__ __forceinline__ T ms_s_min_t(T a, T b) { return a < b ? a : b; }
static __device__ __forceinline__ T ms_s_neg_t(T a) { return -a; }
static __device__ __forceinline__ T ms_s_abs_t(T a) {
  return ms_bits_t(ms_t_bits(a) & ~((U)1 << (SIGN))); }
static __device__ __forceinline__ int ms_s_lt_t(T a, T b) { return a < b; }
static __device__ __forceinline__ int ms_s_gt_t(T a, T b) { return a > b; }
static __device__ __forceinline__ int ms_s_eq_t(T a, T b) { return a == b; }
static __device__ __forceinline__ int ms_s_isnan_t(T a) { return a != a; }
static __device__ __forceinline__ int ms_s_mor_t(int a, int b) { return a | b; }
static __device__ __forceinline__ T ms_s_sel_t(int m, T a, T b) { return m ? a : b; }
static __device__ __forceinline__ T ms_s_pow2i_t(T n) {
  const U mb = (U)(MAGIC);
  n = n + ms_bits_t(mb);
  return ms_bits_t((ms_t_bits(n) + (U)(EBIAS) - mb) << IBITS); }
static __device__ __forceinline__ T ms_s_frexpe_t(T x) {
  const U mb = (U)(MAGIC);
  return ms_bits_t((ms_t_bits(x) >> IBITS) + mb - (U)(EBIAS) + 1) - ms_bits_t(mb); }
static __device__ __forceinline__ T ms_s_frexpm_t(T x) {
  return ms_bits_t((ms_t_bits(x) & (((U)1 << IBITS) - 1)) | ms_t_bits((T)0.5)); }
static __device__ __forceinline__ T ms_s_ldexp_t(T p, T n) {
  const T magic = ms_bits_t((U)(MAGIC));
  const T n1 = (n * (T)0.5 + magic) - magic;
  return (p * ms_s_pow2i_t(n1)) * ms_s_pow2i_t(n - n1); }
static __device__ __forceinline__ T ms_s_copysign_t(T a, T b) {
  const U s = (U)1 << (SIGN);
  return ms_bits_t((ms_t_bits(a) & ~s) | (ms_t_bits(b) & s)); }"""
_PRIM_PARAMS = {"f32": dict(T="float", U="uint32_t", SIGN="31", IBITS="23", EBIAS="127",
                            MAGIC="0x4B400000u", FMA="fmaf"),
                "f64": dict(T="double", U="uint64_t", SIGN="63", IBITS="52", EBIAS="1023",
                            MAGIC="0x4338000000000000ull", FMA="fma")}
# what the readers' C (mshadow/readers.py) uses besides its macros, and the view map
_GATHER = """typedef long long npy_intp;
static __device__ __forceinline__ npy_intp ms_imin(npy_intp a, npy_intp b) { return a < b ? a : b; }
static __device__ __forceinline__ npy_intp ms_imax(npy_intp a, npy_intp b) { return a > b ? a : b; }
#define MS_MIN(a, b) ms_imin((a), (b))
#define MS_MAX(a, b) ms_imax((a), (b))
/* gather.h's ms_start: window i of stride s clipped to lim, lim where i * s passes it or
 * overflows (i, s, lim >= 0: the product's high word is 0 when it fits in 64 bits) */
static __device__ __forceinline__ npy_intp ms_start(npy_intp i, npy_intp s, npy_intp lim) {
  const unsigned long long r = (unsigned long long)i * (unsigned long long)s;
  return (__umul64hi((unsigned long long)i, (unsigned long long)s) != 0 || r > (unsigned long long)lim)
      ? lim : (npy_intp)r; }
#define MS_START(i, s, lim) ms_start((i), (s), (lim))
/* a / b and a % b as C computes them, with one 32-bit division when both are in [0, 2**31):
 * every reader divides its row index, and a 64-bit division costs 40-90 cycles on Intel
 * cores before Ice Lake (a 32-bit one about 26; on a GPU 64-bit division is a subroutine) */
static __device__ __forceinline__ npy_intp ms_idiv(npy_intp a, npy_intp b) {
  return ((unsigned long long)(a | b) >> 31) == 0 ? (npy_intp)((unsigned)a / (unsigned)b) : a / b; }
static __device__ __forceinline__ npy_intp ms_imod(npy_intp a, npy_intp b) {
  return ((unsigned long long)(a | b) >> 31) == 0 ? (npy_intp)((unsigned)a % (unsigned)b) : a % b; }
#define MS_DIV(a, b) ms_idiv((a), (b))
#define MS_MOD(a, b) ms_imod((a), (b))
""" + "\n".join(f"#define MS_RED_{r.name.upper()} {r.id}" for r in REDUCER_TABLE)
_VIEW = f"""typedef struct {{
  long long nmap, colstep;
  long long mdiv[{VIEW_MAXDIM}], mmod[{VIEW_MAXDIM}], mstride[{VIEW_MAXDIM}];
}} ms_cu_view;
static __device__ __forceinline__ long long ms_view_row(const ms_cu_view &m, long long y) {{
  long long off = 0;
  for (long long a = 0; a < m.nmap; ++a) off += ((y / m.mdiv[a]) % m.mmod[a]) * m.mstride[a];
  return off;
}}"""


def view_map(shape, strides):
    """The fields of the ms_cu_view a view leaf of ``shape`` and element ``strides`` binds
    (nmap, colstep, mdiv, mmod, mstride; each list VIEW_MAXDIM long), as _stages.pxi
    _bind_view_at binds a view on the CPU: row y starts at the sum over the leading axes a
    of ((y / mdiv[a]) % mmod[a]) * mstride[a]."""
    shape, strides = tuple(shape), tuple(strides)
    mdiv, mmod, mstride = [0] * VIEW_MAXDIM, [0] * VIEW_MAXDIM, [0] * VIEW_MAXDIM
    if len(shape) == 1:
        mdiv[0], mmod[0] = 1, 1
        return 1, strides[-1], mdiv, mmod, mstride
    div = 1
    for a in range(len(shape) - 2, -1, -1):
        mdiv[a], mmod[a], mstride[a] = div, shape[a], strides[a]
        div *= shape[a]
    return len(shape) - 1, strides[-1], mdiv, mmod, mstride


_TABLE_PRIMS = """static __device__ __forceinline__ int32_t ms_s_bucket_f32(float v, uint32_t base) {
  return (int32_t)((ms_f32_bits(v) - base) >> 22); }
static __device__ __forceinline__ float ms_s_tab_f32(const float *t, int32_t i) { return t[i]; }"""


def _prims(code):
    p = _PRIM_PARAMS[code]
    text = re.sub(r"\b(T|U|SIGN|IBITS|EBIAS|MAGIC|FMA)\b", lambda m: p[m.group(1)], _VMATH_PRIMS)
    text = re.sub(r"\bms_(\w+?)_t\b", lambda m: f"ms_{m.group(1)}_{code}", text)
    text = text.replace("ms_t_bits", f"ms_{code}_bits")
    return text + ("\n" + _TABLE_PRIMS if code == "f32" else "")


def _vmath_functions(code):
    """Every vmath body of type ``code``, as CUDA C on one value (ms_s_<fn>_<code>)."""
    ctype = _CTYPE[code]
    fns = [f[0] for f in vmath.FUNCTIONS]
    out = []
    if code == "f32":
        for name, values in vmath.TABLES.items():   # float32 values: exact as hex literals
            out.append(f"static __device__ const float ms_tab_{name}[16] = {{"
                       + ", ".join(f"{v.hex()}f" for v in values) + "};")

    def c(expr):
        expr = re.sub(r"\bk\(", f"(({ctype})", expr)
        expr = re.sub(r"\btab\((\w+),", r"tab(ms_tab_\1,", expr)
        return re.sub(r"\b([a-z][a-z0-9]*)\(",
                      lambda m: (f"ms_s_{m.group(1)}_{code}(" if m.group(1) != "k" else m.group()),
                      expr)
    for name, arity, bodies in vmath.FUNCTIONS:
        params = ", ".join(f"{ctype} {a}" for a in "xy"[:arity])
        lines = [f"static __device__ __forceinline__ {ctype} ms_s_{name}_{code}({params}) {{"]
        seen = set()
        for line in filter(None, (t.strip() for t in bodies[code].splitlines())):
            if line.startswith("return "):
                lines.append(f"  return {c(line[7:])};")
                continue
            var, expr = (t.strip() for t in line.split("=", 1))
            kind = {"m_": "int", "i_": "int32_t"}.get(var[:2], ctype)
            lines.append(f"  {'' if var in seen else kind + ' '}{var} = {c(expr)};")
            seen.add(var)
        lines.append("}")
        out.append("\n".join(lines))
    assert all(f"ms_s_{f}_{code}" in "\n".join(out) for f in fns)
    return "\n".join(out)


def _int_helpers(code):
    """Integer division (x / 0 -> 0, MIN / -1 -> MIN) and power, as the CPU kernels define
    them (codegen_cpu's; the GPU has no error flag to raise for a division by zero)."""
    t = _CTYPE[code]
    unsigned = code.startswith("u")
    neg1 = "" if unsigned else f"  if (b == ({t})-1) return ({t})(0 - (uint64_t)a);\n"
    negpow = "" if unsigned else (
        f"  if (b < 0) return (a == 1) ? 1 : (a == ({t})-1 ? ((b & 1) ? ({t})-1 : 1) : 0);\n")
    return (f"static __device__ __forceinline__ {t} ms_idiv_{code}({t} a, {t} b) {{\n"
            f"  if (b == 0) return 0;\n{neg1}  return ({t})(a / b);\n}}\n"
            f"static __device__ __forceinline__ {t} ms_ipow_{code}({t} a, {t} b) {{\n"
            f"  {t} r = 1;\n{negpow}"
            f"  while (b) {{ if (b & 1) r = ({t})((uint64_t)r * (uint64_t)a); "
            f"a = ({t})((uint64_t)a * (uint64_t)a); b = ({t})(b >> 1); }}\n"
            f"  return r;\n}}")


def _f2i(src, dst):
    """Float -> integer conversion with x86's answer where C has none (NaN, out of range):
    the minimum of int32 (int64 for an int64), a narrower type keeping its low bits."""
    s, d = _CTYPE[src], _CTYPE[dst]
    wide = "int64_t" if dst == "i64" else "int32_t"
    lim = "9223372036854775808.0" if dst == "i64" else "2147483648.0"
    mn = "(int64_t)0x8000000000000000ull" if dst == "i64" else "(int32_t)0x80000000u"
    return (f"static __device__ __forceinline__ {d} ms_cvt_{src}_{dst}({s} a) {{\n"
            f"  return ({d})((a >= -({s}){lim} && a < ({s}){lim}) ? ({wide})a : {mn});\n}}")


# ---- the emitter ---------------------------------------------------------------------------

def _parse_composite(text):
    """An ops_table composite ('div(1, plus(1, exp(neg(a))))') as the tree form a traced
    operator has: (name, *args) with 'a'..'c' for the arguments and floats for constants."""
    names = {n: (lambda *args, n=n: (n,) + args) for n in OPS_BY_NAME}
    tree = eval(text, {"__builtins__": {}}, dict(names, a="a", b="b", c="c"))  # noqa: S307

    def floats(t):
        if isinstance(t, tuple):
            return (t[0],) + tuple(floats(x) for x in t[1:])
        return t if isinstance(t, str) else float(t)
    return floats(tree)


_COMPOSITES = {op.name: _parse_composite(op.composite) for op in OPS_BY_NAME.values()
               if op.composite}
_F32_LIBM = {"sqrt": "sqrtf", "fabs": "fabsf", "pow": "powf"}


class _Emitter(ir.Visitor):
    def __init__(self):
        self.lines = []        # the loop body
        self.params = []       # leaf and scalar parameters: (name, C type)
        self.leaves = []
        self.scalars = []
        self.needs = {}        # prelude block name -> text (ordered)
        self.nval = 0
        self.checks = False    # a gather reads an index: the kernel takes ms_err
        self.remapped = 0      # > 0 while emitting what is read at other positions (a
        self.in_place = set()  # gather's sources): Binding.in_place

    def need(self, name, text):
        self.needs.setdefault(name, text)

    def value(self, ctype, expr):
        name = f"v{self.nval}"
        self.nval += 1
        self.lines.append(f"const {ctype} {name} = {expr};")
        return name

    # visit(node, ctx) -> (C value name, compute code); ctx = (storage, compute) code a
    # scalar takes from the operator it feeds
    def visit(self, node, *ctx):
        fn = getattr(self, "visit_" + type(node).__name__, None)
        if fn is None:
            raise UnsupportedNodeError(
                f"the CUDA emitter does not lower {type(node).__name__} nodes yet "
                f"({ir.describe(node)}); it covers Leaf, Scalar, Map, Cast, Gather, "
                f"View and ImplicitDot", node=node)
        return fn(node, *ctx)

    def visit_Leaf(self, node, ctx):
        k = len(self.leaves)
        self.leaves.append(Bound("tensor", node.code, node.transposed))
        if not self.remapped and not node.transposed:
            self.in_place.add(k)
        ptr, pitch = f"L{k}", f"L{k}_pitch"
        self.params += [(ptr, f"const {_CTYPE[node.code]} *"), (pitch, "long long")]
        at = f"{ptr}[x * {pitch} + y]" if node.transposed else f"{ptr}[y * {pitch} + x]"
        if node.code == "f16":
            self.half()
            return self.value("float", f"ms_half_to_float({at})"), "f32"
        return self.value(_CTYPE[node.code], at), node.code

    def visit_View(self, node, ctx):
        """A view read in place at (y, x): row y through the view's map, column x times its
        step (the IR's step kind: 0 unit, 1 zero, 2 other, a run-time colstep)."""
        if node.src is not None:
            raise UnsupportedNodeError(
                f"the CUDA emitter does not lower a view of an expression yet "
                f"({ir.describe(node)}): it needs a stage (the source evaluated into scratch, "
                f"the view's map read over it), a later step", node=node)
        k = len(self.leaves)
        self.leaves.append(Bound("view", node.code, node.step))
        self.need("VIEW", _VIEW)
        ptr, vmap = f"L{k}", f"L{k}_map"
        self.params += [(ptr, f"const {_CTYPE[node.code]} *"), (vmap, "ms_cu_view")]
        col = ("x", "0", f"x * {vmap}.colstep")[node.step]
        at = f"{ptr}[ms_view_row({vmap}, y) + {col}]"
        if node.code == "f16":
            self.half()
            return self.value("float", f"ms_half_to_float({at})"), "f32"
        return self.value(_CTYPE[node.code], at), node.code

    def visit_ImplicitDot(self, node, ctx):
        """implicit_dot at (y, x): sum over k of lhs(y, k) * rhs(k, x), k = 0, 1, ... in
        order, each step rounded to the node's type (the CPU kernel's order: the same bits
        with --fmad=false). lhs and rhs are tensors (or .T) or views read in place (a view
        of an expression was staged into one first); K is lhs's column count."""
        code = node.code
        if code not in _IMPLICIT_CODES:
            raise UnsupportedNodeError(f"the CUDA emitter lowers implicit_dot of "
                                       f"{', '.join(sorted(_IMPLICIT_CODES))}, not {code}",
                                       node=node)
        a, K = self.operand_at(node.lhs)
        b, _ = self.operand_at(node.rhs)
        T = _CTYPE[code]
        acc, k = f"v{self.nval}", f"k{self.nval}"
        self.nval += 1
        self.lines += [f"{T} {acc} = 0;",
                       f"for (long long {k} = 0; {k} < {K}; ++{k})",
                       f"  {acc} = ({T})({acc} + {a('y', k)} * {b(k, 'x')});"]
        return acc, code

    def operand_at(self, node):
        """A product operand bound as a leaf: (its element at (r, c) as C text, the name
        of its column count's parameter)."""
        k = len(self.leaves)
        T = _CTYPE[node.code]
        ptr, cols = f"L{k}", f"L{k}_cols"
        if type(node) is ir.Leaf:
            self.leaves.append(Bound("tensor", node.code, node.transposed))
            pitch = f"L{k}_pitch"
            self.params += [(ptr, f"const {T} *"), (pitch, "long long"), (cols, "long long")]
            if node.transposed:
                return (lambda r, c: f"{ptr}[{c} * {pitch} + {r}]"), cols
            return (lambda r, c: f"{ptr}[{r} * {pitch} + {c}]"), cols
        if node.src is not None:
            raise UnsupportedNodeError("an implicit_dot operand that is a view of an "
                                       "expression is staged first (executor)", node=node)
        self.leaves.append(Bound("view", node.code, node.step))
        self.need("VIEW", _VIEW)
        vmap = f"L{k}_map"
        self.params += [(ptr, f"const {T} *"), (vmap, "ms_cu_view"), (cols, "long long")]
        step = ("{c}", "0", f"{{c}} * {vmap}.colstep")[node.step]
        return (lambda r, c: f"{ptr}[ms_view_row({vmap}, {r}) + {step.format(c=c)}]"), cols

    def visit_Gather(self, node, ctx):
        """A reader row (mshadow/readers.py) inlined for element (y, x): its ``row`` with
        x0 = x, then its ``elem`` (``next``, an incremental walk along a block, is not
        needed for one element). LD and IDX of source j are lambdas evaluating that source
        at the element asked for: a tensor or view read in place, or any expression the
        emitter lowers, inlined (fused, no scratch). The value is stored as the gather's
        storage type and read back, as the CPU's gather kernels write it."""
        row = READERS_BY_NAME[node.reader]
        code = node.code
        cc = compute_code(code)
        V = _CTYPE[cc]
        A = V if cc in FLOAT_CODES else "uint64_t"
        k = len(self.leaves)
        self.leaves.append(Bound("gather", code, node.reader))
        self.need("GATHER", _GATHER)
        g = f"L{k}"
        self.params += [(f"{g}_{p}", "long long") for p in row.params]
        self.params += [(f"{g}_vec{j}", "int") for j in range(len(node.srcs))]
        if len(node.srcs) != len(row.sources):
            raise ValueError(f"reader {node.reader} takes sources {row.sources}, the node "
                             f"holds {len(node.srcs)}")
        for j, (name, src) in enumerate(zip(row.sources, node.srcs)):
            self.source(f"{g}_{'idx' if name == 'index' else 'ld'}{j}", src, f"{g}_vec{j}",
                        "npy_intp" if name == "index" else V, code)
        text = "\n".join((row.row, row.elem))
        if "BAD_INDEX" in text:
            self.checks = True
        macros = [("V", V), ("A", A), ("ZERO", "((V)0)"),
                  ("LD(k, r, c)", f"{g}_ld##k((r), (c))"), ("IDX(k, r)", f"{g}_idx##k((r), 0)"),
                  ("BAD_INDEX", "(*ms_err = 1)")]
        for red in REDUCER_TABLE:
            R = red.name.upper()
            fold = f"((V)({self.reducer_fold(red, cc)}))"
            # a GPU selects without a branch (selp) anyway: SELECT is the fold itself
            macros += [(f"INIT_{R}", f"((V)({self.reducer_init(red, cc)}))"),
                       (f"FOLD_{R}(a, b)", fold), (f"SELECT_{R}(a, b)", fold)]
        out = f"v{self.nval}"
        self.nval += 1
        self.lines += [f"#define {m} {t}" for m, t in macros]
        self.lines += [f"{V} {out};", "{"]
        if row.params:
            self.lines.append("  const npy_intp " + ", ".join(f"{p} = {g}_{p}"
                                                            for p in row.params) + ";")
        self.lines.append("  const npy_intp x0 = x; (void)x0;")
        self.lines += ["  " + t for t in row.row.splitlines()]
        self.lines += ["  {", "    V v;", "    {"]
        self.lines += ["      " + t.strip() for t in row.elem.splitlines()]
        self.lines += ["    }", f"    {out} = v;", "  }", "}"]
        self.lines += [f"#undef {m.split('(')[0]}" for m, _ in macros]
        # the gather's output is its storage type (the CPU kernels write it so)
        if code == "f16":
            self.half()
            return self.value("float", f"ms_half_to_float({self.convert(out, cc, code)})"), cc
        return self.value(V, self.convert(out, cc, code)), cc

    def source(self, fn, src, vec, rtype, code):
        """``auto fn = [&](r, c) -> rtype``: source ``src`` of a gather of storage ``code`` at
        row r, column c of its 2-D flattening (of a 1-D source, ``vec`` set: element r + c),
        as the gather reads it: its value stored as its own type, then loaded as the
        gather's value type, or (an index, rtype npy_intp) truncated toward zero."""
        outer, self.lines = self.lines, []
        scode = _node_code(src)
        self.remapped += 1
        try:
            v, rc = self.visit(src, (scode, compute_code(scode)))
        finally:
            self.remapped -= 1
        stored = self.convert(v, rc, scode)
        if scode == "f16":
            self.half()
            stored = f"ms_half_to_float({stored})"
            scode_v = "f32"
        else:
            scode_v = scode
        if rtype == "npy_intp":
            if scode_v in FLOAT_CODES:
                self.need(f"CVT_{scode_v}_i64", _f2i(scode_v, "i64"))
                ret = f"(npy_intp)ms_cvt_{scode_v}_i64({stored})"
            else:
                ret = f"(npy_intp)({stored})"
        else:
            ret = f"({rtype})({stored})"
        body, self.lines = self.lines, outer
        self.lines += [f"auto {fn} = [&](npy_intp ms_r, npy_intp ms_c) -> {rtype} {{",
                       f"  const long long y = {vec} ? 0 : ms_r, x = {vec} ? ms_r + ms_c : ms_c;",
                       "  (void)y; (void)x;"]
        self.lines += ["  " + t for t in body] + [f"  return {ret};", "};"]

    @staticmethod
    def reducer_init(red, cc):
        """Where a fold of REDUCER_TABLE row ``red`` starts, in compute type cc: its number,
        or -inf / +inf (an integer type's minimum / maximum)."""
        if red.init not in ("-inf", "+inf"):
            return str(red.init)
        if cc in FLOAT_CODES:
            return "-INFINITY" if red.init == "-inf" else "INFINITY"
        info = np.iinfo(BY_CODE[cc].np)
        v = int(info.min if red.init == "-inf" else info.max)
        return f"({_CTYPE[cc]})({v + 1}ll - 1)" if v == -2 ** 63 else f"({_CTYPE[cc]}){v}ll"

    @staticmethod
    def reducer_fold(red, cc):
        """The fold of row ``red`` of the value held ``a`` and a new one ``b``: the row's own
        C, else its combine operator's C form (ops_table) on cc."""
        if red.c is not None:
            form = red.c
        else:
            op = OPS_BY_NAME[red.combine]
            form = op.c_int if (cc not in FLOAT_CODES and op.c_int) else op.c
        return re.sub(r"\b([ab])\b", r"(\1)", form)

    def visit_Scalar(self, node, ctx):
        k = len(self.scalars)
        self.scalars.append(ctx)
        self.params.append((f"s{k}", _CTYPE[ctx[1]]))
        return f"s{k}", ctx[1]

    def visit_Cast(self, node, ctx):
        src_code = node.arg.code
        v, cc = self.visit(node.arg, (src_code, compute_code(src_code)))
        if node.code == "f16":   # round through half: the value is what a half holds
            self.half()
            return self.value("float", f"ms_half_to_float({self.convert(v, cc, 'f16')})"), "f32"
        return self.value(_CTYPE[node.code], self.convert(v, cc, node.code)), node.code

    def visit_Map(self, node, ctx):
        cc = compute_code(node.code)
        args = [self.visit(a, (node.code, cc))[0] for a in node.args]
        res = self.apply(node.op, args, cc)
        if node.code == "f16":   # mshadow's half_t: every operator's result is a half
            self.half()
            res = self.value("float", f"ms_half_to_float(ms_float_to_half({res}))")
        return res, cc

    def apply(self, op, args, cc):
        """Operator ``op`` (a built-in's name, or a UserOp) on values of compute type cc."""
        if not isinstance(op, str):
            if op.tree is None:
                raise UntracedOperatorError(
                    f"operator {op.name} could not be traced ({op.reason}), so it has no "
                    f"compiled form: it runs on numpy on the CPU only, never on a GPU",
                    op=op)
            return self.expand(op.tree, args, cc)
        row = OPS_BY_NAME.get(op)
        if row is None:
            raise UnsupportedNodeError(f"the CUDA emitter knows no operator {op!r}", node=op)
        if row.float_only and cc not in FLOAT_CODES:   # integers go through float64
            res = self.apply(op, [self.value("double", f"(double){a}") for a in args], "f64")
            return self.value(_CTYPE[cc], self.convert(res, "f64", cc))
        if row.composite:
            return self.expand(_COMPOSITES[op], args, cc)
        form = row.c_int if (cc not in FLOAT_CODES and row.c_int) else row.c
        ctype = _CTYPE[cc]
        if "ms_s_" in form:
            self.vmath(cc)
        if "ms_i" in form:
            self.need(f"INT_{cc}", _int_helpers(cc))
        form = form.replace("_T(", f"_{cc}(").replace("(T)", f"({ctype})")
        if cc == "f32":
            form = re.sub(r"\b(sqrt|fabs|pow)\(", lambda m: _F32_LIBM[m.group(1)] + "(", form)
        form = re.sub(r"\b[abc]\b", lambda m: args["abc".index(m.group())], form)
        return self.value(ctype, form)

    def expand(self, tree, args, cc):
        if isinstance(tree, str):
            return args["abc".index(tree)]
        if isinstance(tree, float):
            return self.const(tree, cc)
        return self.apply(tree[0], [self.expand(t, args, cc) for t in tree[1:]], cc)

    def const(self, value, cc):
        """A constant of a composite or traced body, as the CPU binds it: rounded to a float
        type, or truncated to an integer one."""
        if cc in FLOAT_CODES:
            bits = struct.unpack("<Q", struct.pack("<d", value))[0]
            return f"(({_CTYPE[cc]})ms_bits_f64(0x{bits:016x}ull))"
        return f"(({_CTYPE[cc]}){int(value)}ll)"

    def store(self, at, res, dst_code, saver):
        """``at <saver> res`` (``res`` a value of dst_code's compute type): combined with the
        value held in the compute type, then rounded once to the storage type."""
        cc = compute_code(dst_code)
        sop = ir.SAVERS[saver]
        if sop is not None:
            cur = self.value(_CTYPE[cc], f"ms_half_to_float({at})" if dst_code == "f16" else at)
            res = self.apply(sop, [cur, res], cc)
        self.lines.append(f"{at} = {self.convert(res, cc, dst_code)};")

    def convert(self, v, src, dst):
        """C conversion of value ``v`` of compute type ``src`` to storage type ``dst``."""
        if src == dst:
            return v
        if dst == "f16":
            self.half()
            return f"ms_double_to_half({v})" if src == "f64" else f"ms_float_to_half((float){v})"
        if dst not in FLOAT_CODES and src in FLOAT_CODES:
            self.need(f"CVT_{src}_{dst}", _f2i(src, dst))
            return f"ms_cvt_{src}_{dst}({v})"
        return f"({_CTYPE[dst]}){v}"

    def half(self):
        self.need("HALF", _HALF)

    def vmath(self, code):
        self.need(f"PRIMS_{code}", _prims(code))
        self.need(f"VMATH_{code}", _vmath_functions(code))


def _check_saver(saver):
    if saver not in ir.SAVER_BY_NAME:
        raise ValueError(f"unknown saver {saver!r} (expected one of "
                         f"{', '.join(ir.SAVER_BY_NAME)})")


def _node_code(node):
    """The storage code of what ``node`` computes (a gather's source)."""
    if type(node) is ir.Scalar:
        raise ValueError("a scalar is not a gather source")
    return node.code


def emit(key, dst_code, saver, dst_view=False):
    """The CUDA kernel of ``dst <saver> exp`` for an element-wise expression: ``key`` its IR
    node, ``dst_code`` the destination's storage code, ``saver`` a name of ir.SAVER_TABLE.

    Returns Emitted(source, name, binding): the source defines ``extern "C" __global__ void
    <name>(long long rows, long long cols, <dst type> *dst, long long dst_pitch, <params>)``,
    every pitch in elements; ``binding`` (a Binding) says what each parameter takes. With
    ``dst_view`` the destination is a view (an assignment target: extension/targets.py):
    ``ms_cu_view dst_map`` in place of dst_pitch, row y at ms_view_row(dst_map, y) and
    column x dst_map.colstep elements apart from dst, its first element."""
    _check_saver(saver)
    if dst_code not in BY_CODE:
        raise ValueError(f"unknown dtype code {dst_code!r}")
    e = _Emitter()
    cc = compute_code(dst_code)
    res, rc = e.visit(key, (dst_code, cc))
    if rc != cc:
        raise ValueError(f"expression {ir.describe(key)} computes {rc}, not the "
                         f"destination's {dst_code}")
    if dst_view:
        e.need("VIEW", _VIEW)
        e.store("dst[ms_view_row(dst_map, y) + x * dst_map.colstep]", res, dst_code, saver)
    else:
        e.store("dst[y * dst_pitch + x]", res, dst_code, saver)
    params = [("rows", "long long"), ("cols", "long long"), ("dst", f"{_CTYPE[dst_code]} *"),
              ("dst_map", "ms_cu_view") if dst_view else ("dst_pitch", "long long")]
    body = "\n".join(line if line.startswith("#") else "      " + line for line in e.lines)
    loops = (f"  for (long long y = blockIdx.y; y < rows; y += gridDim.y) {{\n"
             f"    for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
             f"x < cols;\n         x += (long long)gridDim.x * blockDim.x) {{\n"
             f"{body}\n    }}\n  }}\n")
    return _assemble(e, f"{ir.describe(key)} -> {'view ' if dst_view else ''}dst<{dst_code}> "
                        f"({saver})", params, loops)


REDUCE_BLOCK = 1024   # threads of a reduction block at most (32 warps: one warp folds them)


def emit_reduce(key, dst_code, saver):
    """The CUDA kernel of ``dst <saver> scale * reduce(src)`` for an ir.Reduce ``key``
    (sum_rows, sumall_except_dim, reduce_except_dim, reduce_with_axis and reduce_keepdim,
    their arg forms included): one block an output element at a time (a grid-stride loop
    over outputs), its threads folding the reduced elements of the source, each evaluated
    where it is read (fused: no scratch), in strides of blockDim.x, then each warp by
    shuffles and the first warp the warps' results (blockDim.x a multiple of 32, at most
    REDUCE_BLOCK; every thread runs every step, so the fold's barriers are uniform). The
    reducer's init and fold are its REDUCER_TABLE row, in the source's compute type; an arg
    form (``mask``) keeps (value, index) pairs: the first extreme, a NaN the extreme (numpy's
    argmax), ties to the smaller index. The scale and the saver apply once, to the result.

    The source, of shape S, is read as (A, B, M) around the reduced axis d (with_axis,
    keepdim: output (a, m) folds over b) or around the kept axis (except_dim: output b folds
    over (a, m)). Parameters after the Binding's first four: ``nout``, ``nred`` (elements
    folded per output), ``A``, ``B``, ``M``, ``src_cols`` (S's last axis: element (a, b, m)
    is the source's 2-D element (flat / src_cols, flat % src_cols)), ``dst_cols`` (output o
    is dst's 2-D element (o / dst_cols, o % dst_cols)) and ``scale`` (the compute type)."""
    if type(key) is not ir.Reduce:
        raise TypeError(f"emit_reduce takes an ir.Reduce node, got {ir.describe(key)}")
    _check_saver(saver)
    if dst_code != key.code:
        raise ValueError(f"a reduction of {key.code} is stored into {key.code}, not {dst_code}")
    cc = compute_code(dst_code)
    red = REDUCER_BY_NAME[key.reducer]
    e = _Emitter()
    src_code = _node_code(key.src)
    v, vc = e.visit(key.src, (src_code, compute_code(src_code)))
    A = _CTYPE[cc]
    S = A if A in ("float", "double", "int64_t", "uint64_t") else "int"   # what shuffles
    init = f"({A})({e.reducer_init(red, cc)})"

    def shfl(x, t):
        return f"({t})__shfl_down_sync(0xffffffffu, ({S if t == A else t}){x}, off)"
    if key.mask:   # (acc, idx): idx < 0 holds nothing yet
        cmp = ">" if red.name == "maximum" else "<"

        def better(nv, ni, ov, oi):
            return (f"({oi} < 0 || ({nv} != {nv} ? ({ov} == {ov} || {ni} < {oi}) : "
                    f"({ov} == {ov} && ({nv} {cmp} {ov} || ({nv} == {ov} && {ni} < {oi})))))")
        state = [f"{A} acc = ({A})0;", "long long idx = -1;"]
        e.lines.append(f"if {better(f'(({A}){v})', 'k', 'acc', 'idx')} "
                       f"{{ acc = ({A}){v}; idx = k; }}")
        merge = [f"const {A} ov = {shfl('acc', A)};",
                 f"const long long oi = {shfl('idx', 'long long')};",
                 f"if (oi >= 0 && {better('ov', 'oi', 'acc', 'idx')}) {{ acc = ov; idx = oi; }}"]
        shared = [f"__shared__ {A} sbuf[{REDUCE_BLOCK // 32}];",
                  f"__shared__ long long sidx[{REDUCE_BLOCK // 32}];"]
        put = ["if (lane == 0) { sbuf[warp] = acc; sidx[warp] = idx; }"]
        take = [f"acc = tid < blockDim.x / 32 ? sbuf[tid] : ({A})0;",
                "idx = tid < blockDim.x / 32 ? sidx[tid] : -1;"]
        res = f"({A})(({A})(idx < 0 ? 0 : idx) * scale)"   # mshadow's index starts at 0
    else:
        fold = e.reducer_fold(red, cc)

        def folded(a, b):
            return "(" + re.sub(r"\(([ab])\)",
                                lambda m: f"({a if m.group(1) == 'a' else b})", fold) + ")"
        state = [f"{A} acc = {init};"]
        e.lines.append(f"acc = ({A})({folded('acc', f'({A}){v}')});")
        merge = [f"const {A} other = {shfl('acc', A)};",
                 f"acc = ({A})({folded('acc', 'other')});"]
        shared = [f"__shared__ {A} sbuf[{REDUCE_BLOCK // 32}];"]
        put = ["if (lane == 0) sbuf[warp] = acc;"]
        take = [f"acc = tid < blockDim.x / 32 ? sbuf[tid] : {init};"]
        res = f"({A})(acc * scale)"     # reduce_into's scale, whatever the reducer
    warp = ["  for (int off = 16; off > 0; off >>= 1) {"] + ["    " + t for t in merge] + ["  }"]
    at = "dst[(o / dst_cols) * dst_pitch + o % dst_cols]"
    lines = shared + [
        "const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32;",
        "for (long long o = blockIdx.x; o < nout; o += gridDim.x) {",
        "  /* except_dim keeps b = o; the others keep (a, m) = (o / M, o % M) */",
        "  const long long oa = except_dim ? 0 : o / M, ob = except_dim ? o : 0,",
        "                  om = except_dim ? 0 : o % M;"]
    lines += ["  " + t for t in state]
    lines += ["  for (long long k = tid; k < nred; k += blockDim.x) {",
              "    const long long a = except_dim ? k / M : oa, b = except_dim ? ob : k,",
              "                    m = except_dim ? k % M : om;",
              "    const long long flat = (a * B + b) * M + m;",
              "    const long long y = flat / src_cols, x = flat % src_cols;"]
    lines += ["    " + t for t in e.lines]
    lines += ["  }", "  /* each warp folds its lanes, then the first warp the warps' folds */"]
    lines += warp + ["  " + t for t in put] + ["  __syncthreads();"]
    lines += ["  " + t for t in take] + warp + ["  if (tid == 0) {"]
    e.lines = []
    v, cc = e.value(A, res), compute_code(dst_code)
    if cc != dst_code:     # the CPU rounds the scaled result to dst's type before the saver
        v = e.value(A, f"ms_half_to_float({e.convert(v, cc, dst_code)})")
    e.store(at, v, dst_code, saver)
    lines += ["    " + t for t in e.lines]
    lines += ["  }", "  __syncthreads();   /* sbuf is the next output's */", "}"]
    body = "\n".join(line if line.startswith("#") else "  " + line for line in lines) + "\n"
    params = [("nout", "long long"), ("nred", "long long"), ("A", "long long"),
              ("B", "long long"), ("M", "long long"), ("except_dim", "int"),
              ("src_cols", "long long"), ("dst", f"{_CTYPE[dst_code]} *"),
              ("dst_pitch", "long long"), ("dst_cols", "long long"), ("scale", A)]
    return _assemble(e, f"{ir.describe(key)} -> dst<{dst_code}> ({saver})", params, body)


# the types the CPU's implicit_gemm kernels compute in: those computed as themselves
# (float16, computed as float32, has none)
_IMPLICIT_CODES = frozenset(c for c in BY_CODE if compute_code(c) == c)
SOFTMAX_LANES = 16      # codegen_cpu.REDUCE_LANES: the CPU softmax kernel's sum order
# the float types computed as themselves (float16 computes as its compute type)
FLOAT_COMPUTE = frozenset(c for c in FLOAT_CODES if compute_code(c) == c)
# the grid-stride loop of the kernels that take a thread an element of n (launch.flat)
_FLAT_LOOP = ("for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
              "       i += (long long)gridDim.x * blockDim.x)")


def emit_softmax(code):
    """The CUDA kernel of mshadow's Softmax over rows (nn.softmax of 1-D and 2-D float32 /
    float64 tensors): a block of 32 threads a row (a grid-stride loop over rows): the row's
    maximum, then exp(e - max) stored and summed in SOFTMAX_LANES lanes by the first 16
    threads (element i in lane i % 16, in order; the lanes added pairwise), then d /= sum:
    the CPU kernel's order (codegen_cpu._softmax) and vmath's exp, so the same bits as the
    CPU. ``dst`` may be ``src``. Parameters: rows, cols, dst, dst_pitch, src, src_pitch
    (pitches in elements); launch with blockDim.x = 32."""
    if code not in FLOAT_COMPUTE:
        raise ValueError(f"emit_softmax: the kernel is float32 or float64 rows, got {code!r}")
    T, L = _CTYPE[code], SOFTMAX_LANES
    e = _Emitter()
    e.vmath(code)
    body = f"""  __shared__ {T} part[32];
  __shared__ {T} tot[{L}];
  const unsigned t = threadIdx.x;
  for (long long y = blockIdx.x; y < rows; y += gridDim.x) {{
    const {T} *er = src + y * src_pitch;
    {T} *dr = dst + y * dst_pitch;
    {T} m = ({T})-INFINITY;
    for (long long i = t; i < cols; i += 32) m = er[i] > m ? er[i] : m;
    part[t] = m;
    __syncthreads();
    m = ({T})-INFINITY;
    for (int j = 0; j < 32; ++j) m = part[j] > m ? part[j] : m;
    if (t < {L}) {{
      {T} s = 0;
      for (long long i = t; i < cols; i += {L}) {{
        const {T} v = ms_s_exp_{code}(er[i] - m);
        dr[i] = v;
        s += v;
      }}
      tot[t] = s;
    }}
    __syncthreads();
    if (t == 0)
      for (int w = {L} / 2; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) tot[l] += tot[l + w];
    __syncthreads();
    const {T} s = tot[0];
    for (long long i = t; i < cols; i += 32) dr[i] = dr[i] / s;
    __syncthreads();   /* part and tot are the next row's */
  }}
"""
    params = [("rows", "long long"), ("cols", "long long"), ("dst", f"{T} *"),
              ("dst_pitch", "long long"), ("src", f"const {T} *"), ("src_pitch", "long long")]
    return _assemble(e, f"softmax rows -> dst<{code}>", params, body)


def emit_softmax_grad(code, nd, smooth):
    """The CUDA kernel of mshadow's SoftmaxGrad (``smooth`` False) or SmoothSoftmaxGrad over
    a float32 / float64 tensor of ``nd`` (2 or 3) dimensions, a thread an element of dst's
    rows x cols (a grid-stride loop): the element's class c and target index (2-D: row r is
    the sample, c the column, target tgt[r]; 3-D (Y, C, N) as rows y*C + c, columns n, target
    tgt[y*N + n]); tgt < 0 marks an ignored sample (0 stored). SoftmaxGrad stores src - 1 at
    the target class and src elsewhere; the smooth form (src - 1) + alpha there and src -
    share elsewhere (alpha and share rounded as nn.py does, passed in T): nn.py's operations
    in its order, so the CPU's bits. ``dst`` may be ``src``. Parameters: rows, cols, classes,
    dst, dst_pitch, src, src_pitch (elements), tgt (long long a sample), alpha, share."""
    if code not in FLOAT_COMPUTE or nd not in (2, 3):
        raise ValueError(f"emit_softmax_grad: float32 or float64, 2-D or 3-D, got {code!r}, "
                         f"{nd!r}")
    T = _CTYPE[code]
    e = _Emitter()
    where = ("const long long c = x, t = tgt[y];" if nd == 2 else
             "const long long c = y % classes, t = tgt[(y / classes) * cols + x];")
    hit, miss = ("(s - 1) + alpha", "s - share") if smooth else ("s - 1", "s")
    body = f"""  const long long n = rows * cols;
  {_FLAT_LOOP} {{
    const long long y = i / cols, x = i % cols;
    {where}
    const {T} s = src[y * src_pitch + x];
    dst[y * dst_pitch + x] = t < 0 ? ({T})0 : c == t ? ({T})({hit}) : ({T})({miss});
  }}
"""
    params = [("rows", "long long"), ("cols", "long long"), ("classes", "long long"),
              ("dst", f"{T} *"), ("dst_pitch", "long long"), ("src", f"const {T} *"),
              ("src_pitch", "long long"), ("tgt", "const long long *"), ("alpha", T),
              ("share", T)]
    what = "smooth_softmax_grad" if smooth else "softmax_grad"
    return _assemble(e, f"{what} {nd}-D -> dst<{code}>", params, body)


def emit_softmax_axis1(code):
    """The CUDA kernel of mshadow's Softmax over axis 1 of a 3-D (Y, C, N) float32 / float64
    tensor (dst[y][:][n]), a thread a (y, n) column (a grid-stride loop; threads of a block
    read neighbouring n): the column's maximum, exp(e - max) stored and summed over c in
    order, then each divided by the sum. vmath's exp; nn.py's 3-D path is numpy's, so the
    two agree to rounding. ``dst`` may be ``src``. Parameters: outer (Y), classes (C), cols
    (N), dst, dst_pitch, src, src_pitch (elements: row y*C + c, column n)."""
    if code not in FLOAT_COMPUTE:
        raise ValueError(f"emit_softmax_axis1: float32 or float64, got {code!r}")
    T = _CTYPE[code]
    e = _Emitter()
    e.vmath(code)
    body = f"""  const long long n = outer * cols;
  {_FLAT_LOOP} {{
    const long long y = i / cols, x = i % cols;
    const {T} *er = src + y * classes * src_pitch + x;
    {T} *dr = dst + y * classes * dst_pitch + x;
    {T} m = ({T})-INFINITY;
    for (long long c = 0; c < classes; ++c) m = er[c * src_pitch] > m ? er[c * src_pitch] : m;
    {T} s = 0;
    for (long long c = 0; c < classes; ++c) {{
      const {T} v = ms_s_exp_{code}(er[c * src_pitch] - m);
      dr[c * dst_pitch] = v;
      s += v;
    }}
    for (long long c = 0; c < classes; ++c) dr[c * dst_pitch] = dr[c * dst_pitch] / s;
  }}
"""
    params = [("outer", "long long"), ("classes", "long long"), ("cols", "long long"),
              ("dst", f"{T} *"), ("dst_pitch", "long long"), ("src", f"const {T} *"),
              ("src_pitch", "long long")]
    return _assemble(e, f"softmax axis 1 -> dst<{code}>", params, body)


def emit_scatter_rows(code, mode):
    """The CUDA kernel of nn's row scatters, a thread a (group, column) (a grid-stride loop):
    group u stores row dst_rows[u] of dst from the source rows src_rows[offsets[u] ..
    offsets[u + 1]) in that order: ``mode`` "add" folds them into it one after another
    (AddTakeGrad, AddTakeGradLargeBatch: numpy's add.at order, so the CPU's bits; float32,
    float64), "set" copies the last (IndexFill: the last write wins; any dtype). The host
    groups the rows (distinct dst rows: no two threads store one element). Parameters:
    groups, cols, dst, dst_pitch, src, src_pitch (elements), dst_rows, offsets, src_rows
    (long long)."""
    if mode not in ("add", "set") or (mode == "add" and code not in FLOAT_COMPUTE) or \
            code not in _CTYPE:
        raise ValueError(f"emit_scatter_rows: mode 'add' of float32 / float64 or 'set' of any "
                         f"dtype, got {mode!r}, {code!r}")
    T = _CTYPE[code]
    e = _Emitter()
    if mode == "add":
        fold = f"""{T} acc = *d;
    for (long long j = offsets[u]; j < offsets[u + 1]; ++j) acc = acc + src[src_rows[j] * src_pitch + x];
    *d = acc;"""
    else:
        fold = "*d = src[src_rows[offsets[u + 1] - 1] * src_pitch + x];"
    body = f"""  const long long n = groups * cols;
  {_FLAT_LOOP} {{
    const long long u = i / cols, x = i % cols;
    {T} *d = dst + dst_rows[u] * dst_pitch + x;
    {fold}
  }}
"""
    params = [("groups", "long long"), ("cols", "long long"), ("dst", f"{T} *"),
              ("dst_pitch", "long long"), ("src", f"const {T} *"), ("src_pitch", "long long"),
              ("dst_rows", "const long long *"), ("offsets", "const long long *"),
              ("src_rows", "const long long *")]
    return _assemble(e, f"scatter rows {mode} -> dst<{code}>", params, body)


_PHILOX = """static __device__ __forceinline__ void ms_philox4x32_10(uint32_t c[4], uint32_t k0,
                                                        uint32_t k1) {
  /* Philox4x32-10 (Salmon et al., SC11; Random123's constants): 10 rounds of two 32x32->64
   * products, the key bumped by the Weyl constants between rounds */
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[1] = (uint32_t)p1;
    c[3] = (uint32_t)p0;
    c[0] = n0;
    c[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}"""


SORT_TILE = 256     # elements a block of the radix sort ranks at once (its threads)
SORT_DIGIT = 8      # bits a pass of the radix sort takes
SORT_SEGMENTS = 16  # runs of a tile walked in order by a thread each (16 KiB of counts)
# a key's bits as an unsigned integer whose order is the key's (stable sorts of nn.py):
# floats with every NaN last and -0 as +0 (they compare equal), signed ints with the sign
# bit flipped; ``{k}`` is the key's value, the result is its key bits in 64
_SORT_ORDER = {
    "f32": "ms_order32(__float_as_uint({k}))",
    "f64": "ms_order64((unsigned long long)__double_as_longlong({k}))",
    "f16": "ms_order16({k})",
    "u8": "(unsigned long long){k}",
    "i8": "(unsigned long long)(uint8_t)((uint8_t){k} ^ 0x80u)",
    "i32": "(unsigned long long)((uint32_t){k} ^ 0x80000000u)",
    "i64": "((unsigned long long){k} ^ 0x8000000000000000ull)",
}
_SORT_ORDER_FUNCS = """static __device__ __forceinline__ unsigned long long ms_order32(uint32_t b) {
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFFFFFull;      /* NaN: last */
  if (b == 0x80000000u) b = 0;                                       /* -0 as +0 */
  return (b & 0x80000000u) ? (unsigned long long)(~b) : (unsigned long long)(b | 0x80000000u);
}
static __device__ __forceinline__ unsigned long long ms_order64(unsigned long long b) {
  if ((b & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull) return ~0ull;
  if (b == 0x8000000000000000ull) b = 0;
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
static __device__ __forceinline__ unsigned long long ms_order16(uint16_t b) {
  if ((b & 0x7FFFu) > 0x7C00u) return 0xFFFFull;
  if (b == 0x8000u) b = 0;
  return (b & 0x8000u) ? (unsigned long long)(uint16_t)~b : (unsigned long long)(b | 0x8000u);
}"""


def _sort_tiles():
    """The radix kernels' opening: a grid-stride loop over the tiles t, whose start loads
    dig[e] = the digit (ukeys >> shift) & 255 of the tile's element e (-1 past n) into
    shared memory, every thread its share, then a barrier. The kernel closes the loop."""
    R = 1 << SORT_DIGIT
    return f"""  __shared__ int dig[{SORT_TILE}];
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {{
    for (int e = threadIdx.x; e < {SORT_TILE}; e += blockDim.x) {{
      const long long i = t * {SORT_TILE} + e;
      dig[e] = i < n ? (int)((ukeys[i] >> shift) & {R - 1}) : -1;
    }}
    __syncthreads();
"""


def sort_passes(code):
    """The radix passes of a key of dtype ``code`` (its bits / SORT_DIGIT)."""
    return BY_CODE[code].np.itemsize * 8 // SORT_DIGIT


def emit_sort_keys(code, descending):
    """The first kernel of the GPU's stable radix sort (nn.sort_by_key, vectorized_sort):
    ukeys[i] = the order bits of keys[perm[i]] (_SORT_ORDER; complemented within the key's
    bits when ``descending``: equal keys keep their order, NaN comes first), and with
    ``first`` perm[i] = i (read as i). Parameters: n, first, keys (1-D), ukeys, perm."""
    if code not in _SORT_ORDER:
        raise ValueError(f"emit_sort_keys: no order for dtype {code!r}")
    T, bits = _CTYPE[code], sort_passes(code) * SORT_DIGIT
    e = _Emitter()
    e.need("SORT_ORDER", _SORT_ORDER_FUNCS)
    mask = "~0ull" if bits == 64 else f"((1ull << {bits}) - 1)"
    flip = f" ^ {mask}" if descending else ""
    body = f"""  {_FLAT_LOOP} {{
    const long long p = first ? i : perm[i];
    if (first) perm[i] = i;
    const {T} k = keys[p];
    ukeys[i] = ({_SORT_ORDER[code].format(k="k")}){flip};
  }}
"""
    params = [("n", "long long"), ("first", "long long"), ("keys", f"const {T} *"),
              ("ukeys", "unsigned long long *"), ("perm", "long long *")]
    return _assemble(e, f"sort keys<{code}>{' descending' if descending else ''}", params, body)


def _sort_ranks():
    """After _sort_tiles: the tile cut into S = min(blockDim, SORT_SEGMENTS) runs of
    consecutive elements, each walked in order by one thread, so that loc[s][d] counts
    run s's elements of digit d and rank[e] is the number of e's run's elements before it
    with e's digit. O(1) work a key (a thread a digit counting the whole tile, and each
    element counting the elements before it, took O(SORT_TILE) a key). No atomics: the
    same counts and ranks whatever the block size."""
    R, G = 1 << SORT_DIGIT, SORT_SEGMENTS
    return f"""    for (int k = threadIdx.x; k < {G * R}; k += blockDim.x) loc[k / {R}][k % {R}] = 0;
    __syncthreads();
    if (threadIdx.x < segs) {{
      const int s = threadIdx.x, e1 = (s + 1) * run < {SORT_TILE} ? (s + 1) * run : {SORT_TILE};
      for (int e = s * run; e < e1; ++e) {{
        const int d = dig[e];
        if (d >= 0) rank[e] = loc[s][d]++;
      }}
    }}
    __syncthreads();
"""


def _sort_shared():
    """The shared arrays and run geometry of _sort_ranks (before _sort_tiles' loop)."""
    R, G = 1 << SORT_DIGIT, SORT_SEGMENTS
    return f"""  __shared__ int loc[{G}][{R}];
  __shared__ int rank[{SORT_TILE}];
  const int segs = blockDim.x < {G} ? (int)blockDim.x : {G};
  const int run = ({SORT_TILE} + segs - 1) / segs;
"""


def emit_sort_count():
    """A radix pass's digit counts: tile t of SORT_TILE elements (a block, a grid-stride loop
    over tiles) stores counts[d * tiles + t], the tile's elements whose digit (ukeys >>
    shift) & 255 is d: the sum of its runs' counts (_sort_ranks; no atomics). Parameters:
    n, tiles, shift, ukeys, counts. Any block size."""
    R = 1 << SORT_DIGIT
    body = f"""{_sort_shared()}{_sort_tiles()}{_sort_ranks()}    for (int d = threadIdx.x; d < {R}; d += blockDim.x) {{
      long long c = 0;
      for (int s = 0; s < segs; ++s) c += loc[s][d];
      counts[d * tiles + t] = c;
    }}
    __syncthreads();
  }}
"""
    params = [("n", "long long"), ("tiles", "long long"), ("shift", "long long"),
              ("ukeys", "const unsigned long long *"), ("counts", "long long *")]
    return _assemble(_Emitter(), "sort count", params, body)


def emit_sort_scan():
    """The scan of a radix pass's m counts, chunk by chunk (a block a chunk of ``chunk``
    counts, a grid-stride loop over chunks; each thread takes a run of its chunk, thread 0
    scans the runs' sums in order). ``total`` 1 stores each chunk's sum in part[b]; 0
    replaces the chunk by its exclusive prefix sums plus part[b] (``based``; else from 0).
    The sorter runs it three times: the chunks' sums, their scan in one chunk, each chunk's
    scan from its offset. Parameters: m, chunk, total, based, counts, part. At most
    SORT_SCAN_BLOCK threads a block."""
    B = SORT_SCAN_BLOCK
    body = f"""  __shared__ long long run[{B}];
  __shared__ long long sum;
  const long long nb = blockDim.x;
  for (long long b = blockIdx.x; b * chunk < m; b += gridDim.x) {{
    const long long c0 = b * chunk, c1 = c0 + chunk < m ? c0 + chunk : m;
    const long long per = (c1 - c0 + nb - 1) / nb;
    const long long lo = c0 + threadIdx.x * per < c1 ? c0 + threadIdx.x * per : c1;
    const long long hi = lo + per < c1 ? lo + per : c1;
    long long s = 0;
    for (long long i = lo; i < hi; ++i) s += counts[i];
    run[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {{
      long long r = based ? part[b] : 0;
      for (long long t = 0; t < nb; ++t) {{ const long long v = run[t]; run[t] = r; r += v; }}
      sum = r;
    }}
    __syncthreads();
    if (total) {{
      if (threadIdx.x == 0) part[b] = sum;
    }} else {{
      s = run[threadIdx.x];
      for (long long i = lo; i < hi; ++i) {{ const long long v = counts[i]; counts[i] = s; s += v; }}
    }}
    __syncthreads();
  }}
"""
    params = [("m", "long long"), ("chunk", "long long"), ("total", "long long"),
              ("based", "long long"), ("counts", "long long *"), ("part", "long long *")]
    return _assemble(_Emitter(), "sort scan", params, body)


SORT_SCAN_CHUNK = 8192      # counts a block of the scan takes (32 a thread of 256)
SORT_SCAN_BLOCK = 1024


def emit_sort_scatter():
    """A radix pass's stable move: element e of tile t goes to offsets[d * tiles + t] (the
    scanned counts) plus the tile's elements before it with its digit d (those of the runs
    before its own, an exclusive scan of loc over the runs, and its rank within its run:
    _sort_ranks), its key and its perm entry with it. Parameters: n, tiles, shift, ukeys,
    perm, ukeys_out, perm_out, offsets. Any block size."""
    R = 1 << SORT_DIGIT
    body = f"""{_sort_shared()}{_sort_tiles()}{_sort_ranks()}    for (int d = threadIdx.x; d < {R}; d += blockDim.x) {{
      int c = 0;
      for (int s = 0; s < segs; ++s) {{ const int v = loc[s][d]; loc[s][d] = c; c += v; }}
    }}
    __syncthreads();
    for (int e = threadIdx.x; e < {SORT_TILE}; e += blockDim.x) {{
      const long long i = t * {SORT_TILE} + e;
      if (i < n) {{
        const int d = dig[e];
        const long long at = offsets[d * tiles + t] + loc[e / run][d] + rank[e];
        ukeys_out[at] = ukeys[i];
        perm_out[at] = perm[i];
      }}
    }}
    __syncthreads();
  }}
"""
    params = [("n", "long long"), ("tiles", "long long"), ("shift", "long long"),
              ("ukeys", "const unsigned long long *"), ("perm", "const long long *"),
              ("ukeys_out", "unsigned long long *"), ("perm_out", "long long *"),
              ("offsets", "const long long *")]
    return _assemble(_Emitter(), "sort scatter", params, body)


def emit_gather_1d(code):
    """dst[i] = src[perm[i]] over n elements of 1-D tensors (a sort's last step; src a copy
    of the tensor dst is). Parameters: n, perm, src, dst."""
    T = _CTYPE[code]
    body = f"""  {_FLAT_LOOP}
    dst[i] = src[perm[i]];
"""
    params = [("n", "long long"), ("perm", "const long long *"), ("src", f"const {T} *"),
              ("dst", f"{T} *")]
    return _assemble(_Emitter(), f"gather 1-D <{code}>", params, body)


# elements per Philox block (4 words): a float32 uniform takes a word, a float64 one or a
# float32 gaussian two, a float64 gaussian four; raw bits (GetRandInt) a word
RANDOM_PER_COUNTER = {("uniform", "f32"): 4, ("uniform", "f64"): 2, ("gaussian", "f32"): 2,
                      ("gaussian", "f64"): 1, ("bits", "i32"): 4, ("bits", "i64"): 4}


def emit_random(dist, code):
    """The CUDA kernel filling a float32 / float64 tensor with mshadow's SampleUniform (``dist``
    "uniform": a + (b - a) * u, u in [0, 1), a value rounded up to b taken to the float
    below it) or SampleGaussian ("gaussian": a + b * z, z
    standard normal by Box-Muller), counter-based: element i of the tensor's logical order
    (y * cols + x, whatever its pitch) comes from Philox4x32-10 with key (seed_lo, seed_hi)
    and counter (n, n >> 32, 0, 0), n = offset + i / per (per: 4 elements a block for a
    float32 uniform, 2 for a float64 uniform or a float32 gaussian, 1 for a float64
    gaussian), its words from (i % per) * (4 / per) on: float32 uniform (word >> 8) *
    2**-24; float64 uniform the top 53 bits of two words (first word high) * 2**-53;
    gaussian u1 from the first half of its words (as uniform, in (0, 1]: +1), u2 from the
    other, z = sqrt(-2 log u1) cos(2 pi u2). So any grid, thread count or launch order
    gives the same values, and a launcher
    continues a stream by advancing ``offset`` past the counters used. "bits" (GetRandInt)
    stores each element's word (per 4): int64 its value, int32 its bits. Parameters: rows,
    cols, dst, dst_pitch (elements), seed_lo, seed_hi, offset (long long), a, b."""
    if (dist, code) not in RANDOM_PER_COUNTER:
        raise ValueError(f"emit_random: dist is 'uniform' or 'gaussian' and the dtype float32 "
                         f"or float64, or 'bits' into int32 / int64, got {dist!r}, {code!r}")
    T = _CTYPE[code]
    e = _Emitter()
    e.need("PHILOX", _PHILOX)
    per = RANDOM_PER_COUNTER[dist, code]
    if dist == "bits":
        unit = unit1 = ""
    elif code == "f32":
        unit = "(float)(w[{j}] >> 8) * 0x1p-24f"
        unit1 = "(float)((w[{j}] >> 8) + 1) * 0x1p-24f"
    else:
        unit = "(double)((((uint64_t)w[{j}] << 32) | w[{j} + 1]) >> 11) * 0x1p-53"
        unit1 = "(double)(((((uint64_t)w[{j}] << 32) | w[{j} + 1]) >> 11) + 1) * 0x1p-53"
    words = 4 // per                                            # words an element takes
    if dist == "bits":       # the word as C++'s unsigned: into int32 its bits, int64 its value
        value = f"({T})w[j]"
    elif dist == "uniform":
        # rounding can reach b: the interval stays half-open, as the CPU's sample_uniform
        after = "nextafterf" if code == "f32" else "nextafter"
        value = (f"ms_cu_below(a + (b - a) * ({unit.format(j='j')}), a, b)")
        e.need("BELOW_" + code, f"""static __device__ __forceinline__ {T} ms_cu_below({T} v, {T} a, {T} b) {{
  return (v < b || !(a < b)) ? v : {after}(b, a);
}}""")
    else:
        half = words // 2
        value = (f"a + b * (sqrt(({T})-2 * log({unit1.format(j='j')})) * "
                 f"cos(({T})6.283185307179586 * ({unit.format(j=f'j + {half}')})))")
    body = f"""  const long long n = rows * cols;
  {_FLAT_LOOP} {{
    const unsigned long long ctr = (unsigned long long)offset + (unsigned long long)(i / {per});
    uint32_t w[4] = {{(uint32_t)ctr, (uint32_t)(ctr >> 32), 0u, 0u}};
    ms_philox4x32_10(w, (uint32_t)seed_lo, (uint32_t)seed_hi);
    const int j = (int)(i % {per}) * {words};
    const {T} v = {value};
    dst[(i / cols) * dst_pitch + i % cols] = v;
  }}
"""
    params = [("rows", "long long"), ("cols", "long long"), ("dst", f"{T} *"),
              ("dst_pitch", "long long"), ("seed_lo", "long long"), ("seed_hi", "long long"),
              ("offset", "long long"), ("a", T), ("b", T)]
    return _assemble(e, f"random {dist} -> dst<{code}>", params, body)


def _assemble(e, what, params, body):
    """The Emitted kernel of emitter ``e``: its preludes, then ``extern "C" __global__ void
    <name>(<params>, <e's leaf and scalar params>[, ms_err])`` around ``body``; the name is a
    hash of the text."""
    params = list(params) + e.params
    if e.checks:
        params.append(("ms_err", "int *"))
    prelude = [("STDINT", _STDINT), ("BITS", _BITS)] + list(e.needs.items())
    src = [f"/* {what}; generated by mshadow/cuda/lower.py */"]
    for name, text in prelude:
        guard = f"MS_CU_{name}"
        if name == "STDINT":
            guard = "MS_CU_STDINT"   # the host shim defines it: it has <stdint.h>
        src += [f"#ifndef {guard}", f"#define {guard}", text, "#endif"]
    sig = ",\n    ".join(f"{t}{'' if t.endswith('*') else ' '}{n}" for n, t in params)
    kernel = f'extern "C" __global__ void KERNEL(\n    {sig}) {{\n{body}}}\n'
    text = "\n".join(src) + "\n" + kernel
    name = KERNEL_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:16]
    return Emitted(text.replace("KERNEL", name), name,
                   Binding(tuple(e.leaves), tuple(e.scalars), tuple(params), e.checks,
                           frozenset(e.in_place)))
