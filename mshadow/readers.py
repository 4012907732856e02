"""The readers table: one row per gathering extension family (the Remap nodes that are not
affine views). A row gives the reader's sources, its named integer parameters and its
per-element index form in C; mshadow/codegen_cpu.py generates one CPU kernel per row and
storage type from it (and a CUDA emitter can generate its kernels from the same rows).

The index form fills element (y, x) of the output's 2-D flattening (rows y of every
leading axis, columns x of the last axis) and is written in three parts, all C:

    row   runs once per block, with y and x0 (the block's first column) known;
    elem  runs for each x = x0 + i and must set ``v``;
    next  (optional) runs after each element: incremental index walks (no division).

Inside them: the parameters by name (``npy_intp``), ``LD(k, r, c)`` (source k's element
at row r, column c, loaded as the value type V), ``IDX(k, r)`` (element r of the index
source k, truncated toward zero as mshadow's casts), ``ZERO``, for each row of
REDUCER_TABLE ``INIT_<NAME>``, ``FOLD_<NAME>(a, b)`` (its init value and its combine,
in V) and ``SELECT_<NAME>(a, b)`` (the same fold with no branch: a selecting fold's ``?:``
on a float compiles to a branch, which real data mispredicts; loops the compiler vectorizes
select without one and keep FOLD; a reader that takes a ``red`` parameter writes its fold with ``_fold_over``, which
switches on ``red`` over every row, so a new row needs no C here), ``MS_RED_<NAME>`` (the
rows' ids, never their numbers) and ``BAD_INDEX`` (records an out-of-range index: the engine raises
IndexError; indices are also checked before anything is stored). ``V`` is the type values
are folded in (float for float16: integer sums and products wrap in it), ``A`` the
accumulator of the gradient sums (float for float16, uint64
for integers: wrapping, which equals mshadow's result modulo the type's width). A row is
compiled for every storage type; its kernel is named ``g_<name>_<code>``.

Adding a gathering extension is one row here, its constructor (a few lines building the
GatherExp with ``gather`` in extension/gather.py) and its tests.
"""
import re
from collections import namedtuple
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

# THE reducer table (ms.red.*), one row each (docs/architecture.md, "A reducer"):
#   name     ms.red.<name>, and MS_RED_<NAME> in C (emitted into dtypes_gen.h by codegen_types.py)
#   id       the value of a reader's ``red`` parameter
#   combine  the ops_table operator that folds a value in; its C form (ops_table's ``c``, in
#            ``a`` the value held and ``b`` the new one) is the kernels' fold unless ``c``
#   c        the fold's own C form where it differs from combine's: MXNet's red::maximum
#            propagates NaN (a NaN held sticks, a NaN value is taken), ops_table's maximum not
#   init     where a fold starts: a number, or "-inf" / "+inf" (an integer type's minimum /
#            maximum); per dtype in C (codegen_cpu.reducer_init) and numpy (reduce.init_value)
#   ufunc    numpy's combining ufunc, by name: the oracle, and how partial results combine
#   block    the reducing saver of the fused reduction (one partial per block: ir.REDUCERS,
#            kernels reduce_<block>_<code>)
#   acc      its accumulating saver (a running row, never an ordinary saver: ir.ACCUMULATORS
#            and kernels acc_<block>_<code>, which fold several rows a call)
#   arg      numpy's index-of function for mask=True (None: no mask form; the readers take the
#            first value the fold keeps over every other, a NaN first of all)
#   grad     mshadow's PartialGrad(redres, redsrc) in C, what unpool / ch_unpool multiply the
#            gradient by (None: no gradient form; they refuse the reducer)
#   lanes    an arithmetic fold (True): a block folds element i into lane i % 16 and combines
#            the lanes pairwise (ms.sum's order, which vectorises), float partials combine in
#            float64 and half values fold in float32 (as every float16 computes), integers
#            wrap. False: a selecting fold, in element order in the value's own type (which of
#            +0 / -0 it keeps depends on the order)
#   simd     a selecting fold's packet op ("max" / "min"), which folds as ``c`` does wherever
#            no NaN and no +0 / -0 tie is in play: the fused reduction's blocks take it where
#            they find neither (codegen_cpu._reduce_in_order). None: none
# ms.red, the reductions, ms.sum, pool/unpool/chpool, the readers' C and the fused kernels
# all read it: adding a reducer is one row plus its tests.
ReducerDef = namedtuple("ReducerDef", "name id combine c init ufunc block acc arg grad lanes simd",
                        defaults=(None,))
_NAN_MAX = "((a == a && !(a >= b)) ? b : a)"
_NAN_MIN = "((a == a && !(a <= b)) ? b : a)"
_TIED = "(redres == redsrc ? 1 : 0)"
REDUCER_TABLE = (
    ReducerDef("sum", 0, "plus", None, 0, "add", "sum", "sumto", None, "1", True),
    ReducerDef("maximum", 1, "maximum", _NAN_MAX, "-inf", "maximum", "max", "maxto", "argmax",
               _TIED, False, "max"),
    ReducerDef("minimum", 2, "minimum", _NAN_MIN, "+inf", "minimum", "min", "minto", "argmin",
               _TIED, False, "min"),
    # MXNet's red::product (src/operator/mshadow_op.h): dst *= src from 1. No gradient form:
    # its PartialGrad, redres / redsrc, divides by every zero input
    ReducerDef("product", 3, "mul", None, 1, "multiply", "prod", "prodto", None, None, True),
)
REDUCER_IDS = {r.name: r.id for r in REDUCER_TABLE}          # by ms.red name
REDUCER_BY_NAME = {r.name: r for r in REDUCER_TABLE}


def _each_reducer(body, rows=REDUCER_TABLE, default="v = ZERO;"):
    """C: ``switch (red)`` with one case per reducer row, ``body`` (or ``body(row)``) with @
    replaced by the row's upper-case name (INIT_@, FOLD_@(a, b), SELECT_@(a, b): the fold's
    init and combine, defined per storage type by codegen_cpu.py from the row). Any other
    id runs ``default`` (the constructors pass table ids only)."""
    cases = "".join(f"\n        case MS_RED_{r.name.upper()}: {{ "
                    + (body(r) if callable(body) else body).replace("@", r.name.upper())
                    + " break; }" for r in rows)
    return "switch (red) {" + cases + f"\n        default: {default}\n      }}"


def _fold_over(loop, value):
    """C: ``v`` = the fold of ``value`` over ``loop`` (a C loop header), from the reducer's
    init value, in the value type V."""
    return _each_reducer(f"V res = INIT_@; {loop} {{ const V t = {value}; "
                         f"res = SELECT_@(res, t); }} v = res;")


def _partial_grad(redres, redsrc):
    """C: mshadow's Reducer::PartialGrad(redres, redsrc) of the reducer ``red``, as A."""
    out = "(A)0"
    for r in reversed([r for r in REDUCER_TABLE if r.grad is not None]):
        g = re.sub(r"\bredres\b", redres, re.sub(r"\bredsrc\b", redsrc, r.grad))
        out = f"(red == MS_RED_{r.name.upper()} ? (A)({g}) : {out})"
    return out


@dataclass(frozen=True)
class Reader:
    name: str
    doc: str
    sources: Tuple[str, ...]          # source names, in binding order
    params: Tuple[str, ...]           # integer parameters, by name
    elem: str
    row: str = ""
    next: str = ""
    # src_rows(p, y0, y1) -> (r0, r1): the rows of source 0 (in its 2-D flattening) that
    # output rows [y0, y1) read, p the parameters by name, or (r0, r1, c0, c1): a box of
    # its rows and columns (col2im); or a tuple of such functions, one per source (None:
    # a source read anywhere). A reader evaluates an expression
    # source that has one band by band into cache-sized scratch (docs/architecture.md).
    src_rows: Optional[Callable] = None
    # src_rows takes output columns [x0, x1) instead of rows: the assignment then runs in
    # bands of columns (im2col: the columns of one image read that image's rows only)
    bands_over_cols: bool = False
    # its sources may be strided views read in place (2-D ViewLeafs, any column step):
    # take, choose_row, im2col, concat, take_grad (extension/gather.py _operand)
    views: bool = False
    # its value is a scatter of source 0's rows, added at the row index source 1 gives:
    # when source 0 is an expression, the lowering evaluates it band by band and adds the
    # bands into an accumulator (a "scatter" stage) instead of running the gather kernel,
    # which would need the whole source (take_grad)
    scatter: bool = False
    # the REDUCER_TABLE column its ``red`` parameter's row must fill ("grad": unpool and
    # ch_unpool multiply by PartialGrad): its constructor refuses the other reducers
    red_needs: str = ""
    # (optional, C, after ``row``) the row of source 0 whose columns [x0, x0 + n) the block
    # is, verbatim, or -1: the kernel then copies the bytes (memcpy) instead of the element
    # loop, where the columns are contiguous (take: 1.35x faster than the loop)
    copy: str = ""
    # (optional, C, once a block before its elements) prefetches of what a later block will
    # read, ``PREFETCH(k, r, c, n)``: source k's row r from column c, n elements (at most
    # 1 KiB; the hardware prefetcher follows a longer row). take's rows are at random
    # addresses: without it each block waits for memory (take of an expression reads two)
    prefetch: str = ""
    # (optional, C, after ``row``; sources with contiguous columns) writes the block's
    # first outputs itself, ``ST(i, v)`` storing out[i], and sets ``done`` to how many: the
    # element loop does the rest (from the walk state ``next`` keeps, left at ``done``).
    # pool: its inner windows, vectorized over the outputs (_WINDOW_TILES); im2col, col2im
    block: str = ""
    # (optional, C, before the row loop) runs rows [0, yr) of the call itself and leaves
    # ``yr`` there (0: none); the row loop does the rest. pool: rows of under 8 outputs
    # (_SMALL_ROWS), where the row loop's own work (a division, the tile's set-up) was most
    # of the kernel
    rows: str = ""

    def rows_of(self, k):
        """Source k's src_rows function, or None."""
        if isinstance(self.src_rows, tuple):
            return self.src_rows[k]
        return self.src_rows if k == 0 else None

    def pack(self, **params):
        """The parameters in the kernel's order; every name given, none unknown."""
        if len(params) == len(self.params):
            try:
                return tuple([int(params[p]) for p in self.params])
            except KeyError:
                pass
        missing = [p for p in self.params if p not in params]
        extra = [p for p in params if p not in self.params]
        if missing or extra:
            raise TypeError(f"reader {self.name}: parameters {self.params}, got "
                            f"{tuple(params)} (missing {missing}, unknown {extra})")
        return tuple(int(params[p]) for p in self.params)

    def kernel(self, code):
        return f"g_{self.name}_{code}"


def _pad_rows(p, y0, y1):
    H, oH, py = p["H"], p["oH"], p["py"]
    h0 = min(max(y0 % oH - py, 0), H)
    h1 = min(max((y1 - 1) % oH - py + 1, 0), H)
    return y0 // oH * H + h0, (y1 - 1) // oH * H + h1


def _up_row(p, y):
    return y // p["oH"] * p["H"] + y % p["oH"] // p["scale"]


def _pool_rows(p, y0, y1):
    H, oH, sy, ky = p["H"], p["oH"], p["sy"], p["ky"]
    return (y0 // oH * H + min(y0 % oH * sy, H),
            (y1 - 1) // oH * H + min((y1 - 1) % oH * sy + ky, H))


def _same_rows(p, y0, y1):
    return y0, y1


def _im2col_rows(p, x0, x1):
    """The image rows (every channel's) that output columns [x0, x1) of im2col read."""
    per_image, rows = p["oh"] * p["ow"], p["C"] * p["H"]
    return x0 // per_image * rows, ((x1 - 1) // per_image + 1) * rows


def _col2im_box(p, y0, y1):
    """The box of the column matrix that output rows [y0, y1) of col2im (rows (n, c, h) of
    the image) read: the ky*kx rows of their channels, and the columns of the output
    positions (n, oy, *) whose windows cover their h."""
    C, H, kk = p["C"], p["H"], p["ky"] * p["kx"]
    sy, oh, ow, reach = p["sy"], p["oh"], p["ow"], (p["ky"] - 1) * p["dy"]
    n0, n1 = y0 // (C * H), (y1 - 1) // (C * H)
    c0, c1 = y0 // H % C, (y1 - 1) // H % C
    one_plane = n0 == n1 and c0 == c1
    h0, h1 = (y0 % H, (y1 - 1) % H) if one_plane else (0, H - 1)
    oy0 = max(0, -(-(h0 - reach) // sy))
    oy1 = min(oh - 1, h1 // sy)
    rows = (c0 * kk, (c1 + 1) * kk) if n0 == n1 else (0, C * kk)
    return rows + ((n0 * oh + oy0) * ow, (n1 * oh + oy1 + 1) * ow)


def _concat_rows(part):
    """Rows of concat's source ``part`` (0: a, 1: b): along the columns every output row
    reads the same row of each; along a leading axis groups of ra + rb output rows hold
    ra rows of a, then rb rows of b."""
    def rows(p, y0, y1):
        if p["along_columns"]:
            return y0, y1
        ra, rb = p["ra"], p["rb"]
        g0, rr0 = divmod(y0, ra + rb)
        g1, rr1 = divmod(y1 - 1, ra + rb)
        if part == 0:
            return g0 * ra + min(rr0, ra), g1 * ra + min(rr1 + 1, ra)
        return g0 * rb + max(rr0 - ra, 0), g1 * rb + max(rr1 + 1 - ra, 0)
    return rows


def _unpool_rows(p, y0, y1):
    """The pooled rows the output rows [y0, y1) of unpool read (its windows' rows)."""
    H, ky, sy, pH = p["H"], p["ky"], p["sy"], p["pH"]
    h0, h1 = y0 % H, (y1 - 1) % H
    return (y0 // H * pH + (0 if h0 < ky else min((h0 - ky + sy) // sy, pH)),
            (y1 - 1) // H * pH + min((h1 + sy) // sy, pH))


def _ch_unpool_rows(p, y0, y1):
    """The pooled rows of the images that output rows [y0, y1) of ch_unpool lie in."""
    per_img = p["C"] * p["H"]
    pooled = p["pC"] * p["H"]
    return y0 // per_img * pooled, ((y1 - 1) // per_img + 1) * pooled


# pool's outputs whose windows lie inside the row (x*sx + kx <= W), 64 at a time: the
# window's rows and columns are the outer loops and the outputs the inner one, which the
# compiler vectorizes (strides 1 and 2 spelled out); each output folds its window in the
# element loop's order, so the two give the same bits. Max pooling per element cost 4x sum.
# Below 8 outputs the vectorized loop's set-up costs more than it saves (a 2x2 pool of
# (8192, 2, 8, 8), rows of 4: 1.6-1.9x the scalar forms): an arithmetic fold leaves them
# to the element loop, a selecting fold to the same loops with SELECT, which do not
# branch on the data (the element loop's branches on random data cost it 1.4-2x).
def _tile_loops(fold):
    return ("for (a = ys; a < ye; ++a) for (b = 0; b < kx; ++b) {\n"
            f"            if (sx == 1) for (j = 0; j < mm; ++j) {{ const V u = LD(0, base + a, "
            f"c0 + b + j); acc[j] = {fold}(acc[j], u); }}\n"
            f"            else if (sx == 2) for (j = 0; j < mm; ++j) {{ const V u = LD(0, base + "
            f"a, c0 + b + 2 * j); acc[j] = {fold}(acc[j], u); }}\n"
            f"            else for (j = 0; j < mm; ++j) {{ const V u = LD(0, base + a, c0 + b + "
            f"j * sx); acc[j] = {fold}(acc[j], u); }}\n"
            "          }\n")


def _tile(r):
    store = "          for (j = 0; j < mm; ++j) ST(t + j, acc[j]);"
    if r.lanes:
        return ("for (j = 0; j < mm; ++j) acc[j] = INIT_@;\n          " + _tile_loops("FOLD_@")
                + store)
    return ("if (mm >= 8) {\n          for (j = 0; j < mm; ++j) acc[j] = INIT_@;\n          "
            + _tile_loops("FOLD_@") + store + "\n          } else {\n          "
            + _SMALL_TILE + "\n          }")


# under 8 outputs (a 2x2 pool of an 8-wide image has 4 a row), VL outputs at a time in one
# 16-byte vector VV (a GCC / clang vector: SSE2 or NEON), folded by VSELECT_@, the lane-wise
# SELECT_@. A selecting fold keeps the leftmost extreme, which any grouping of the elements
# in order finds: window columns b and b + 1 fold first, halving the chain of dependent
# folds, with the same bits. A dense row at stride 1 or 2 is read by vector loads (and one
# shuffle, VEVENS); any other lane by lane, at constant lane numbers when all VL are
# outputs (a variable lane goes through memory). The scalar loop over acc[] it replaces was
# 4,300 instructions of a (1, 2, 8, 8) pool's 21,000.
_SMALL_LOAD = ("if (rem == VL && DENSE_V && sx <= 2) {{\n"
               "                const char *p_ = src0 + (base + a) * rs0 + ({c}) * (npy_intp)sizeof(T);\n"
               "                if (sx == 1) memcpy(&{v}, p_, sizeof {v});\n"
               "                else {{ VV lo_, hi_;   /* elements 0..VL-1, VL-1..2VL-2: the even ones */\n"
               "                  memcpy(&lo_, p_, sizeof lo_); memcpy(&hi_, p_ + (VL - 1) * (npy_intp)sizeof(T), sizeof hi_);\n"
               "                  {v} = VEVENS(lo_, hi_); }}\n"
               "              }} else if (rem == VL) {{ for (q_ = 0; q_ < VL; ++q_) {v}[q_] = LD(0, base + a, {c} + q_ * sx); }}\n"
               "              else {{ {v} = va; for (q_ = 0; q_ < rem; ++q_) {v}[q_] = LD(0, base + a, "
               "{c} + q_ * sx); }}\n              ")
_SMALL_TILE = (
    "for (j = 0; j < mm; j += VL) {\n"
    "            const npy_intp rem = MS_MIN(mm - j, VL); npy_intp q_; VV va;\n"
    "            for (q_ = 0; q_ < VL; ++q_) va[q_] = INIT_@;\n"
    "            for (a = ys; a < ye; ++a) for (b = 0; b < kx; b += 2) {\n"
    "              const npy_intp c = c0 + b + j * sx; VV u, w;\n              "
    + _SMALL_LOAD.format(v="u", c="c")
    + "if (b + 1 < kx) {\n              "
    + _SMALL_LOAD.format(v="w", c="c + 1")
    + "u = VSELECT_@(u, w); }\n"
    "              va = VSELECT_@(va, u);\n"
    "            }\n"
    "            if (rem == VL) { for (q_ = 0; q_ < VL; ++q_) ST(t + j + q_, va[q_]); }\n"
    "            else { for (q_ = 0; q_ < rem; ++q_) ST(t + j + q_, va[q_]); }\n"
    "          }")


_SMALL_ROW_LOOP = (
    "for (; yr < nr; ++yr) {\n"
    "      char *out = args[1] + yr * dims[4];\n"
    "      const npy_intp ys = oy * sy, ye = ys + ky, base = img * H;\n"
    "      " + _each_reducer(lambda r: _SMALL_TILE, [r for r in REDUCER_TABLE if not r.lanes],
                            default="break;") + "\n"
    "      if (++oy == oH) { oy = 0; ++img; }\n"
    "    }")

# pool's rows of under 8 outputs, every window whole, over a source with dense columns: the
# call's rows here, each row's image and window row counted on (not divided), its outputs
# by _SMALL_TILE. A (1, 2, 8, 8) 2x2 pool: 8 rows of 4 outputs, 25 -> 8-11 ns a row. Whole
# windows: the last output column's and row's fit (a pshape's oH can be any index: its
# bound is divided, not multiplied, so nothing overflows).
_SMALL_ROWS = (
    "if (n < 8 && cs0 == (npy_intp)sizeof(T) && x0 + n <= (W - kx) / sx + 1\n"
    "      && oH - 1 <= (H - ky) / sy && (" + " || ".join(
        f"red == MS_RED_{r.name.upper()}" for r in REDUCER_TABLE if not r.lanes) + ")) {\n"
    "#define CSTEP(k) ((npy_intp)sizeof(T))\n"
    "    npy_intp img = MS_DIV(dims[1], oH), oy = MS_MOD(dims[1], oH), a, b, j;\n"
    "    const npy_intp mm = n, t = 0, c0 = x0 * sx;\n"
    "    /* the common 2x2 windows at stride 2 as constants: loops the compiler unrolls */\n"
    "    if (ky == 2 && kx == 2 && sx == 2) { const npy_intp ky = 2, kx = 2, sx = 2;\n"
    "    " + _SMALL_ROW_LOOP + "\n    } else {\n    " + _SMALL_ROW_LOOP + "\n    }\n"
    "#undef CSTEP\n"
    "  }")

_ARITHMETIC = " || ".join(f"red == MS_RED_{r.name.upper()}" for r in REDUCER_TABLE if r.lanes)
_WINDOW_TILES = (
    "{ npy_intp t, j, m = (W - kx) / sx + 1 - x0; if (m > n) m = n;\n"
    f"    if (m < (({_ARITHMETIC}) ? 8 : 2)) m = 0;\n"
    "    for (t = 0; t < m; t += 64) {\n"
    "      const npy_intp mm = MS_MIN(m - t, 64), c0 = (x0 + t) * sx; V acc[64];\n"
    "      /* stride 2 over a dense row at AVX-512: the deinterleaving tile (POOL_S2) */\n"
    "      if (sx == 2 && mm >= 8 && CSTEP(0) == (npy_intp)sizeof(T) && ms_isa_level >= 3\n"
    "          && POOL_S2(src0, rs0, base, ys, ye, kx, c0, mm, red, out + t * (npy_intp)sizeof(T)))\n"
    "        continue;\n      "
    + _each_reducer(_tile, default="m = 0;")
    + "\n    }\n    done = m > 0 ? m : 0; }")

# concat a run of source elements at a time: along columns, the part of the row from a and
# the part from b; along a leading axis, whole rows from one source, and when the source and
# the output rows are dense, every following row of this call from the same source in one
# copy (a (32, 64, 28, 28) concat on axis 1 has rows of 28: a call per row cost 1.7x numpy).
# memmove: raw bytes, so every dtype (float16 and NaN payloads too) is copied exactly.
_CONCAT_RUNS = (
    "{ const npy_intp ts = (npy_intp)sizeof(T);\n"
    "    if (along_columns) {\n"
    "      npy_intp na = split - x0; if (na > n) na = n; if (na < 0) na = 0;\n"
    "      if (na > 0) memmove(out, src0 + y * rs0 + x0 * ts, (size_t)(na * ts));\n"
    "      if (n > na) memmove(out + na * ts, src1 + y * rs1 + (x0 + na - split) * ts, "
    "(size_t)((n - na) * ts));\n"
    "    } else {\n"
    "      const int in_a = rr < ra;\n"
    "      const char *s = in_a ? src0 + (grp * ra + rr) * rs0 : src1 + (grp * rb + rr - ra) * rs1;\n"
    "      npy_intp k = 1;\n"
    "      if (x0 == 0 && (in_a ? rs0 : rs1) == n * ts && dims[4] == n * ts) {\n"
    "        k = (in_a ? ra : ra + rb) - rr;\n"
    "        if (k > nr - yr) k = nr - yr;\n"
    "      }\n"
    "      memmove(out, s + x0 * ts, (size_t)(k * n * ts));\n"
    "      yr += k - 1;   /* the rows copied with this one */\n"
    "    }\n"
    "    done = n; }")

# im2col a run of outputs at a time: a run is one output row (oy) of one image, read from
# one image row at the columns ox*sx + xoff (a memcpy for stride 1), zeros outside the
# image (the padding a pad source folds in: xoff, yoff already less px, py); the element
# loop's walk state (ox, oy, img) stays right. Per element it cost 2.3x numpy.
_IM2COL_RUNS = (
    "{ npy_intp k, run;\n"
    # the outputs ox in [xlo, xhi) of an image row read it, the rest are zeros: row y's
    # constants, divided once here (an idiv a run was a fifth of a stride-1 im2col's time)
    "    const npy_intp lim = W - xoff, xhi = lim > 0 ? (lim + sx - 1) / sx : 0;\n"
    "    const npy_intp xlo = xoff < 0 ? (sx - 1 - xoff) / sx : 0;\n"
    "    i = 0;\n"
    # stride 1 and every output of an image row reading it (no column padding on this
    # tap): whole output rows are one memcpy each, or zeros above and below the image,
    # with none of the general runs' clamps (they were 1/6 of a 3x3 im2col's time)
    "    if (sx == 1 && xlo == 0 && xhi >= ow && ox == 0) {\n"
    "      const char *plane = src0 + ((img * C + c) * H) * rs0 + xoff * (npy_intp)sizeof(T);\n"
    "      for (; n - i >= ow; i += ow) {\n"
    "        const npy_intp h = oy * sy + yoff;\n"
    "        if (h >= 0 && h < H) memcpy(out + i * (npy_intp)sizeof(T), plane + h * rs0, "
    "(size_t)ow * sizeof(T));\n"
    "        else for (k = 0; k < ow; ++k) ST(i + k, ZERO);\n"
    "        if (++oy == oh) { oy = 0; ++img; plane += C * H * rs0; }\n"
    "      }\n"
    "    }\n"
    "    for (; i < n; i += run) {\n"
    "      const npy_intp h = oy * sy + yoff;\n"
    "      /* outputs [klo, khi) of the run read the image */\n"
    "      npy_intp khi = h >= 0 && h < H ? xhi - ox : 0;\n"
    "      npy_intp klo = xlo - ox;\n"
    "      run = MS_MIN(ow - ox, n - i);\n"
    "      if (khi > run) khi = run;\n"
    # (a run that starts past xhi: a block that begins in the right padding, two or more
    # columns deep, once stored a zero before its output, into the register before it)
    "      if (khi < 0) khi = 0;\n"
    "      if (klo < 0) klo = 0;\n"
    "      if (klo > khi) klo = khi;\n"
    "      for (k = 0; k < klo; ++k) ST(i + k, ZERO);\n"
    "      if (khi > klo) {\n"
    "        const npy_intp r = (img * C + c) * H + h;\n"
    "        if (sx == 1) memcpy(out + (i + klo) * (npy_intp)sizeof(T), src0 + r * rs0 + "
    "(ox + klo + xoff) * (npy_intp)sizeof(T), (size_t)(khi - klo) * sizeof(T));\n"
    "        else for (k = klo; k < khi; ++k) ST(i + k, LD(0, r, (ox + k) * sx + xoff));\n"
    "      }\n"
    "      for (k = khi; k < run; ++k) ST(i + k, ZERO);\n"
    "      ox += run;\n"
    "      if (ox == ow) { ox = 0; if (++oy == oh) { oy = 0; ++img; } }\n"
    "    }\n"
    "    done = n; }")

# col2im 64 outputs at a time: for each tap (a, b) in the element loop's order, the outputs
# it reaches (x = b*dx + q*sx, q < ow) add their column entries, a contiguous run for stride
# 1 that the compiler vectorizes; each output sums its taps in the same order (same bits).
_COL2IM_TILES = (
    "{ npy_intp t, j, q, qlo, qhi, lo, up;\n"
    "    for (t = 0; t < n; t += 64) {\n"
    "      const npy_intp mm = MS_MIN(n - t, 64), xa = x0 + t; A acc[64];\n"
    "      for (j = 0; j < mm; ++j) acc[j] = 0;\n"
    "      for (a = ky - 1; a >= 0; --a) {\n"
    "        const npy_intp ty = h - a * dy;\n"
    "        if (ty < 0 || ty % sy != 0 || ty / sy >= oh) continue;\n"
    "        for (b = kx - 1; b >= 0; --b) {\n"
    "          const npy_intp r = (c * ky + a) * kx + b, col = (img * oh + ty / sy) * ow;\n"
    "          lo = xa - b * dx; up = xa + mm - 1 - b * dx;\n"
    "          if (up < 0) continue;\n"
    "          qlo = lo <= 0 ? 0 : (lo + sx - 1) / sx;\n"
    "          qhi = MS_MIN(ow, up / sx + 1);\n"
    "          if (sx == 1) for (q = qlo; q < qhi; ++q) acc[q - lo] += (A)LD(0, r, col + q);\n"
    "          else for (q = qlo; q < qhi; ++q) acc[q * sx - lo] += (A)LD(0, r, col + q);\n"
    "        }\n"
    "      }\n"
    "      for (j = 0; j < mm; ++j) ST(t + j, (V)acc[j]);\n"
    "    }\n"
    "    done = n; }")

_WINDOW_REDUCE = "\n      " + _fold_over("for (a = ys; a < ye; ++a) for (b = xs; b < xe; ++b)",
                                          "LD(0, base + a, b)")

READERS = (
    Reader("pad", "zero padding of the last two axes: out(lead, oh, ow) = src(lead, oh - py, "
           "ow - px), 0 outside", ("src",), ("H", "W", "py", "px", "oH"),
           row="const npy_intp lead = MS_DIV(y, oH), h = MS_MOD(y, oH) - py;",
           elem="v = (h >= 0 && h < H && x >= px && x - px < W) ? LD(0, lead * H + h, x - px) : ZERO;",
           src_rows=_pad_rows),
    Reader("take", "take(index, src): out[y][x] = src[index[y]][x]", ("src", "index"),
           ("K", "N"),
           row="const npy_intp r = IDX(1, y); const int ok = r >= 0 && r < K; if (!ok) BAD_INDEX;",
           elem="v = ok ? LD(0, r, x) : ZERO;", views=True, copy="ok ? r : -1",
           prefetch="if (y + 8 < N) { const npy_intp q = IDX(1, y + 8); "
                    "if (q >= 0 && q < K) PREFETCH(0, q, x0, n); }"),
    Reader("choose_row", "mat_choose_row_element: out[x] = src[x][index[x]] (a 1-D output)",
           ("src", "index"), ("cols",),
           elem="{ const npy_intp c = IDX(1, x); if (c < 0 || c >= cols) { BAD_INDEX; v = ZERO; } "
                "else v = LD(0, x, c); }", views=True),
    Reader("fill_row", "mat_fill_row_element: src with src[y][index[y]] = val[y]",
           ("src", "index", "val"), ("cols",),
           row="const npy_intp c = IDX(1, y); if (c < 0 || c >= cols) BAD_INDEX;",
           elem="v = x == c ? LD(2, y, 0) : LD(0, y, x);", src_rows=_same_rows),
    Reader("upsample", "upsampling_nearest: out(lead, oh, ow) = src(lead, oh / s, ow / s)",
           ("src",), ("H", "scale", "oH"),
           row="const npy_intp r = MS_DIV(y, oH) * H + MS_MOD(y, oH) / scale;",
           elem="v = LD(0, r, x / scale);",
           src_rows=lambda p, y0, y1: (_up_row(p, y0), _up_row(p, y1 - 1) + 1)),
    Reader("concat", "concat along the last axis (split: the first column of b) or a leading "
           "one (in each group of ra + rb rows the first ra come from a)",
           ("a", "b"), ("split", "along_columns", "ra", "rb"),
           row="const npy_intp grp = along_columns ? 0 : y / (ra + rb), "
               "rr = along_columns ? 0 : y % (ra + rb);",
           elem="if (along_columns) v = x < split ? LD(0, y, x) : LD(1, y, x - split);\n"
                "      else v = rr < ra ? LD(0, grp * ra + rr, x) : LD(1, grp * rb + rr - ra, x);",
           block=_CONCAT_RUNS, src_rows=(_concat_rows(0), _concat_rows(1)), views=True),
    Reader("reshape", "reshape of a pitched source that re-cuts its rows: output element "
           "(y, x) is element y * ocols + x of the source in row-major order",
           ("src",), ("ocols", "scols"),
           row="npy_intp r = (y * ocols + x0) / scols, c = (y * ocols + x0) % scols;",
           elem="v = LD(0, r, c);",
           next="if (++c == scols) { c = 0; ++r; }",
           src_rows=lambda p, y0, y1: (y0 * p["ocols"] // p["scols"],
                                       -(-(y1 * p["ocols"]) // p["scols"]))),
    Reader("one_hot", "one_hot_encode: out[y][x] = (index[y] == x)", ("index",), ("num_choices",),
           row="const npy_intp c = IDX(0, y); if (c < 0 || c >= num_choices) BAD_INDEX;",
           elem="v = (V)(x == c ? 1 : 0);"),
    Reader("range", "range: out[x] = start + (x / repeat) * step (start, step: the bits of "
           "doubles)", (), ("repeat", "start_bits", "step_bits"),
           row="double start, step; memcpy(&start, &start_bits, 8); memcpy(&step, &step_bits, 8);",
           elem="v = (V)(start + (double)(x / repeat) * step);"),
    Reader("im2col", "unpack_patch2col: out[(c*ky + i)*kx + j][(n*oh + oy)*ow + ox] = "
           "img(n, c, oy*sy + i*dy - py, ox*sx + j*dx - px), zero outside the image (py, px: "
           "the zero padding of a pad source, folded in)",
           ("img",), ("C", "H", "W", "ky", "kx", "sy", "sx", "dy", "dx", "oh", "ow", "py", "px"),
           row="const npy_intp xoff = MS_MOD(y, kx) * dx - px, "
               "yoff = MS_MOD(MS_DIV(y, kx), ky) * dy - py, c = MS_DIV(y, kx * ky);\n"
               "  /* walk (image, oy, ox) incrementally: divisions once per block */\n"
               "  npy_intp ox = x0 % ow, oy = (x0 / ow) % oh, img = x0 / (ow * oh);",
           elem="{ const npy_intp h = oy * sy + yoff, w = ox * sx + xoff;\n"
                "      v = (h >= 0 && h < H && w >= 0 && w < W) ? "
                "LD(0, (img * C + c) * H + h, w) : ZERO; }",
           next="if (++ox == ow) { ox = 0; if (++oy == oh) { oy = 0; ++img; } }",
           block=_IM2COL_RUNS, src_rows=_im2col_rows, bands_over_cols=True, views=True),
    Reader("pool", "pool: out(lead, py, px) = reduce of src(lead, py*sy.., px*sx..) over the "
           "ky x kx window clipped to the image (a window past it keeps the init value)",
           ("src",), ("red", "H", "W", "ky", "kx", "sy", "sx", "oH"),
           row="const npy_intp ys = MS_START(MS_MOD(y, oH), sy, H), ye = MS_MIN(ys + ky, H);\n"
               "  const npy_intp base = MS_DIV(y, oH) * H;\n  npy_intp a, b;",
           elem="const npy_intp xs = MS_START(x, sx, W), xe = MS_MIN(xs + kx, W);"
                + _WINDOW_REDUCE,
           block=_WINDOW_TILES, rows=_SMALL_ROWS, src_rows=_pool_rows),
    Reader("unpool", "unpool: out(y, x) = sum over the pooled windows holding (y, x) of "
           "PartialGrad * grad (every tied extreme gets the gradient)",
           ("data_src", "data_pooled", "grad_pooled"), ("red", "H", "ky", "kx", "sy", "sx", "pH", "pW"),
           row="const npy_intp h = MS_MOD(y, H), prow = MS_DIV(y, H) * pH;\n"
               "  const npy_intp pymin = h < ky ? 0 : (h - ky) / sy + 1;\n"
               "  const npy_intp pymax = MS_MIN(h / sy + 1, pH);\n  npy_intp a, b;",
           elem="const npy_intp pxmin = x < kx ? 0 : (x - kx) / sx + 1;\n"
                "      const npy_intp pxmax = MS_MIN(x / sx + 1, pW);\n"
                "      const V vsrc = LD(0, y, x);\n"
                "      A acc = 0;\n"
                "      for (a = pymin; a < pymax; ++a) for (b = pxmin; b < pxmax; ++b) {\n"
                "        /* PartialGrad times grad, as mshadow: a 0 partial still multiplies */\n"
                f"        const A pg = {_partial_grad('vsrc', 'LD(1, prow + a, b)')};\n"
                "        acc += pg * (A)LD(2, prow + a, b);\n"
                "      }\n"
                "      v = (V)acc;",
           src_rows=(_same_rows, _unpool_rows, _unpool_rows), red_needs="grad"),
    Reader("chpool", "chpool: out(n, c, h, w) = reduce over channels [c*stride - pad, +nsize), "
           "clipped by the output channel count (quirk 11) and by C",
           ("src",), ("red", "C", "oC", "H", "nsize", "stride", "pad"),
           row="const npy_intp h = MS_MOD(y, H), c = MS_MOD(MS_DIV(y, H), oC), img = MS_DIV(MS_DIV(y, H), oC);\n"
               "  const npy_intp cs = MS_MAX(c * stride - pad, 0);\n"
               "  const npy_intp ce = MS_MIN(MS_MIN(c * stride - pad + nsize, oC), C);\n"
               "  npy_intp k;",
           elem=_fold_over("for (k = cs; k < ce; ++k)", "LD(0, (img * C + k) * H + h, x)"),
           src_rows=lambda p, y0, y1: (y0 // (p["oC"] * p["H"]) * p["C"] * p["H"],
                                       ((y1 - 1) // (p["oC"] * p["H"]) + 1) * p["C"] * p["H"])),
    Reader("ch_unpool", "ch_unpool: the gradient of chpool (mshadow's window formula, its end "
           "clipped by the pooled channel count)",
           ("data_src", "data_pooled", "grad_pooled"), ("red", "C", "pC", "H", "nsize", "stride", "pad"),
           row="const npy_intp h = MS_MOD(y, H), c = MS_MOD(MS_DIV(y, H), C), img = MS_DIV(MS_DIV(y, H), C);\n"
               "  /* the pooled channels whose windows hold c, in unsigned arithmetic: c + pad and\n"
               "   * the quotients fit at a stride or pad near INDEX_MAX (+ stride wrapped) */\n"
               "  const uint64_t cp = (uint64_t)c + (uint64_t)pad;\n"
               "  const uint64_t qs = cp < (uint64_t)nsize ? 0 : (cp - (uint64_t)nsize) / (uint64_t)stride + 1;\n"
               "  const uint64_t qe = cp / (uint64_t)stride + 1;\n"
               "  const npy_intp cs = qs < (uint64_t)pC ? (npy_intp)qs : pC;\n"
               "  const npy_intp ce = qe < (uint64_t)pC ? (npy_intp)qe : pC;\n  npy_intp k;",
           elem="const V vsrc = LD(0, y, x);\n"
                "      A acc = 0;\n"
                "      for (k = cs; k < ce; ++k) {\n"
                "        const npy_intp prow = (img * pC + k) * H + h;\n"
                f"        const A pg = {_partial_grad('vsrc', 'LD(1, prow, x)')};\n"
                "        acc += pg * (A)LD(2, prow, x);\n"
                "      }\n"
                "      v = (V)acc;",
           src_rows=(_same_rows, _ch_unpool_rows, _ch_unpool_rows), red_needs="grad"),
    Reader("col2im", "pack_col2patch: out(n, c, h, w) = sum of the column entries "
           "unpack_patch2col reads from (h, w), windows in mshadow's order, each tap found exactly",
           ("mat",), ("C", "H", "ky", "kx", "sy", "sx", "dy", "dx", "oh", "ow"),
           row="const npy_intp h = MS_MOD(y, H), c = MS_MOD(MS_DIV(y, H), C), img = MS_DIV(MS_DIV(y, H), C);\n  npy_intp a, b;",
           elem="A acc = 0;\n"
                "      for (a = ky - 1; a >= 0; --a) {\n"
                "        const npy_intp ty = h - a * dy;\n"
                "        if (ty < 0 || ty % sy != 0 || ty / sy >= oh) continue;\n"
                "        for (b = kx - 1; b >= 0; --b) {\n"
                "          const npy_intp tx = x - b * dx;\n"
                "          if (tx < 0 || tx % sx != 0 || tx / sx >= ow) continue;\n"
                "          acc += (A)LD(0, (c * ky + a) * kx + b, (img * oh + ty / sy) * ow + tx / sx);\n"
                "        }\n"
                "      }\n"
                "      v = (V)acc;",
           block=_COL2IM_TILES, src_rows=_col2im_box),
)


# reduce_with_axis.h nested in an expression, as mshadow's chainer: each output element
# reduces its source elements along the axis in order, in the value type (the sum in A),
# from the reducer's init value; with ``mask`` the index of the first maximum (minimum),
# a NaN counting as the extreme (numpy's argmax). A root reduction (``y[:] =
# reduce_with_axis(...)``) is evaluated by the fused reduction engine instead.
_AXIS_REDUCE = ("""
      if (mask) {
        V best = ZERO; npy_intp arg = 0;
        """ + _each_reducer("for (b = 0; b < N; ++b) { const V t = LD(0, ROW(b), COL(b)); "
                            "if (b == 0 || (best == best && FOLD_@(best, t) != best)) "
                            "{ best = t; arg = b; } }", [r for r in REDUCER_TABLE if r.arg])
                + """
        v = (V)arg;
      } else {
        """ + _fold_over("for (b = 0; b < N; ++b)", "LD(0, ROW(b), COL(b))") + """
      }""")
READERS += (
    Reader("reduce_axis", "reduce_with_axis over a leading axis: out(a, m, x) = reduce over b "
           "of src(a, b, m, x), rows (a, b, m) of the source's 2-D flattening",
           ("src",), ("red", "mask", "B", "M"),
           row="const npy_intp a0 = MS_DIV(y, M), m0 = MS_MOD(y, M);\n  npy_intp b;",
           elem="#define N B\n#define ROW(b) ((a0 * B + (b)) * M + m0)\n#define COL(b) x"
                + _AXIS_REDUCE + "\n#undef N\n#undef ROW\n#undef COL",
           src_rows=lambda p, y0, y1: (y0 // p["M"] * p["B"] * p["M"],
                                       ((y1 - 1) // p["M"] + 1) * p["B"] * p["M"])),
    Reader("reduce_last", "reduce_with_axis over the last axis: out element (y, x) reduces "
           "source row y * W + x", ("src",), ("red", "mask", "C", "W"),
           row="npy_intp b;",
           elem="const npy_intp r0 = y * W + x;\n#define N C\n#define ROW(b) r0\n"
                "#define COL(b) (b)" + _AXIS_REDUCE + "\n#undef N\n#undef ROW\n#undef COL",
           src_rows=lambda p, y0, y1: (y0 * p["W"], y1 * p["W"])),
)

# take_grad.h: the gradient of take, a scatter-add read as a gather. Every output element
# sums, in increasing i, the src rows whose index is its row (mshadow's TakeGradExp::Eval);
# the block's prelude scans the index once for the first and last match.
READERS += (
    Reader("take_grad", "take_grad: out[k][x] = sum over i with index[i] == k of src[i][x], "
           "in increasing i", ("src", "index"), ("N", "K"),
           row="npy_intp lo = N, hi = -1, j;\n"
               "  for (j = 0; j < N; ++j) {\n"
               "    const npy_intp k = IDX(1, j);\n"
               "    if (k == y) { if (lo == N) lo = j; hi = j; }\n"
               "    else if (k < 0 || k >= K) BAD_INDEX;\n"
               "  }",
           elem="A acc = 0;\n"
                "      for (j = lo; j <= hi; ++j) if (IDX(1, j) == y) acc += (A)LD(0, j, x);\n"
                "      v = (V)acc;", views=True, scatter=True),
)

# complex.h on an interleaved (re, im) last axis: output column x of a row is the real (x
# even) or imaginary (x odd) part of complex element x / 2. A real operand (cr's rhs, rc's
# lhs) has one column per complex element and an explicit 0 imaginary part, so inf or NaN
# there still gives NaN, as in mshadow. Division is mshadow's textbook formula.
_CX_LOAD = {
    "cc": "const V ar = LD(0, y, 2 * c), ai = LD(0, y, 2 * c + 1), "
          "br = LD(1, y, 2 * c), bi = LD(1, y, 2 * c + 1);",
    "cr": "const V ar = LD(0, y, 2 * c), ai = LD(0, y, 2 * c + 1), br = LD(1, y, c), bi = 0;",
    "rc": "const V ar = LD(0, y, c), ai = 0, br = LD(1, y, 2 * c), bi = LD(1, y, 2 * c + 1);",
}
_CX_OP = {
    "mul": "v = (x & 1) ? ar * bi + br * ai : ar * br - ai * bi;",
    "div": "v = (x & 1) ? (br * ai - ar * bi) / (br * br + bi * bi)\n"
           "                  : (ar * br + ai * bi) / (br * br + bi * bi);",
}
READERS += tuple(
    Reader(f"cx_{op}_{kind}", f"complex_{op}_{kind}: (a {'*' if op == 'mul' else '/'} b) per "
           f"complex element", ("a", "b"), (),
           elem=f"const npy_intp c = x >> 1;\n      {_CX_LOAD[kind]}\n      {_CX_OP[op]}",
           src_rows=(_same_rows, _same_rows))
    for op in ("mul", "div") for kind in ("cc", "cr", "rc"))
READERS += (
    Reader("cx_conj", "conj: the imaginary parts negated", ("a",), (),
           elem="v = (x & 1) ? -LD(0, y, x) : LD(0, y, x);", src_rows=_same_rows),
    Reader("cx_exchange", "complex_exchange: real and imaginary parts swapped", ("a",), (),
           elem="v = LD(0, y, x ^ 1);", src_rows=_same_rows),
    Reader("cx_pad_imag", "complex_pad_imag: a real source as complex, imaginary parts 0",
           ("a",), (), elem="v = (x & 1) ? (V)0 : LD(0, y, x >> 1);", src_rows=_same_rows),
    Reader("cx_abs_square", "complex_abs_square: re * re + im * im per complex element",
           ("a",), (), elem="v = LD(0, y, 2 * x) * LD(0, y, 2 * x) + "
                            "LD(0, y, 2 * x + 1) * LD(0, y, 2 * x + 1);", src_rows=_same_rows),
    Reader("cx_sum_real_imag", "complex_sum_real_imag: re + im per complex element", ("a",), (),
           elem="v = LD(0, y, 2 * x) + LD(0, y, 2 * x + 1);", src_rows=_same_rows),
)

READERS_BY_NAME = {r.name: r for r in READERS}
