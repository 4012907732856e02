"""Build-time generator of the CPU kernels (kernels_gen.h) from the operator table.

Every kernel has numpy's inner-loop signature ``f(char **args, npy_intp const *dims,
npy_intp const *steps, void *data)`` so the plan executor calls generated kernels and numpy's
own ufunc loops the same way. Float kernels with a packet form get one SIMD body per ISA.
Run by setup.py; ``python -m mshadow.codegen_cpu OUT`` writes the header by hand.
"""
import hashlib
import os
import re
import struct
import sys

if __package__:
    from .ops_table import OPS, OPS_BY_NAME, COMPUTE_TYPES, STORAGE_TYPES, FLOAT_CODES, kernel_kind
    from . import readers, vmath
    from .dtypes import compute_code
    from .codegen_types import write_if_changed
else:  # loaded by path from setup.py, before the package is importable
    from ops_table import OPS, OPS_BY_NAME, COMPUTE_TYPES, STORAGE_TYPES, FLOAT_CODES, kernel_kind
    import readers
    from dtypes import compute_code
    from codegen_types import write_if_changed
    import vmath

# The SIMD levels above plain C, by architecture (packet.h): level k of an architecture is
# the k-th of its ISAs. Each architecture's kernels and dispatch tables are emitted under
# its macro (_per_arch), so one header serves every target.
ARCH_ISAS = (("MS_X86", ("sse2", "avx2", "avx512")), ("MS_ARM64", ("neon",)))
ISAS = tuple(isa for _, isas in ARCH_ISAS for isa in isas)
_TARGET = {"sse2": "", "avx2": '__attribute__((target("avx2,fma"))) ',
           "avx512": '__attribute__((target("avx512f"))) ', "neon": ""}


def _per_arch(emit):
    """The C lines ``emit(isas)`` gives for each architecture's ISAs, each under its macro:
    #if MS_X86 ... #elif MS_ARM64 ... #endif (no lines on other architectures)."""
    out = []
    for k, (macro, isas) in enumerate(ARCH_ISAS):
        out.append(f"#{'if' if k == 0 else 'elif'} {macro}")
        out += emit(isas)
    return out + ["#endif"]


def _level_table(decl, level0, isas, name):
    """``decl = {level0, name(isa) for each isa}``: a dispatch table indexed by ms_isa_level."""
    return f"{decl} = {{{level0}, " + ", ".join(name(isa) for isa in isas) + "};"
_ARGS = "abc"


def _c_expr(op, code, ctype):
    expr = op.c_int if (code not in FLOAT_CODES and op.c_int) else op.c
    expr = expr.replace("_T(", f"_{code}(")
    expr = re.sub(r"\(T\)", f"({ctype})", expr)
    if code == "f32":  # the float forms of libm functions, not the double ones
        expr = re.sub(r"\b(sqrt|exp|log|log1p|tanh|pow|fabs)\(", r"\1f(", expr)
    return expr


def _packet_fn(op, code, ctype, isa):
    """One SIMD body: every operand is a vector or (bit i of smask) a broadcast scalar."""
    n = op.arity
    pexpr = re.sub(r"P\((\w+)\)", lambda m: f"ms_{isa}_{m.group(1)}_{code}", op.packet)
    V = f"ms_{isa}_v_{code}"
    W = f"ms_{isa}_W_{code}"
    cexpr = _c_expr(op, code, ctype)
    lines = [f"static {_TARGET[isa]}void ms_pk_{op.name}_{code}_{isa}("
             f"char *rp, char **in, npy_intp n, int smask) {{",
             f"  {ctype} *r = ({ctype} *)rp;",
             "  npy_intp i = 0;"]
    for k in range(n):
        lines.append(f"  const {ctype} *{_ARGS[k].upper()} = (const {ctype} *)in[{k}];")
    lines.append("  switch (smask) {")
    for mask in range(2 ** n - 1):  # all-scalar never reaches a packet body
        lines.append(f"  case {mask}: {{")
        vec = [k for k in range(n) if not mask >> k & 1]
        for k in range(n):
            if mask >> k & 1:
                lines.append(f"    const {V} {_ARGS[k]} = ms_{isa}_set1_{code}({_ARGS[k].upper()}[0]);")
        align = " | ".join(f"(uintptr_t)({_ARGS[k].upper()})" for k in vec)
        lines.append(f"    if ((((uintptr_t)r | {align}) % sizeof({V})) == 0) {{")
        for ld, st in (("load", "store"), ("loadu", "storeu")):
            if ld == "loadu":
                lines.append("    } else {")
            lines.append(f"      for (; i + {W} <= n; i += {W}) {{")
            for k in vec:
                lines.append(f"        const {V} {_ARGS[k]} = ms_{isa}_{ld}_{code}({_ARGS[k].upper()} + i);")
            lines.append(f"        ms_{isa}_{st}_{code}(r + i, {pexpr});")
            lines.append("      }")
        lines.append("    }")
        lines.append("    break;")
        lines.append("  }")
    lines.append("  }")
    # scalar tail, identical arithmetic
    lines.append("  for (; i < n; ++i) {")
    for k in range(n):
        idx = "0" if False else f"((smask >> {k}) & 1 ? 0 : i)"
        lines.append(f"    const {ctype} {_ARGS[k]} = {_ARGS[k].upper()}[{idx}];")
    lines.append(f"    r[i] = {cexpr};")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _loop_kernel(name, n_in, ctypes_in, ctype_out, expr, packet_tab=None):
    """The numpy-signature kernel: packet dispatch, contiguous plain loops, strided loop."""
    L = [f"static void ms_k_{name}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{",
         "  const npy_intp n = dims[0];",
         "  npy_intp i;",
         f"  char *rp = args[{n_in}];",
         f"  const npy_intp sr = steps[{n_in}];",
         "  (void)data;"]
    for k in range(n_in):
        L.append(f"  const char *{_ARGS[k]}p = args[{k}];")
        L.append(f"  const npy_intp s{_ARGS[k]} = steps[{k}];")
    so = f"(npy_intp)sizeof({ctype_out})"
    sizes = [f"(npy_intp)sizeof({ctypes_in[k]})" for k in range(n_in)]
    if packet_tab:
        conds = " && ".join(f"(s{_ARGS[k]} == {sizes[k]} || s{_ARGS[k]} == 0)" for k in range(n_in))
        mask = " | ".join(f"((s{_ARGS[k]} == 0) << {k})" for k in range(n_in))
        L += ["#if MS_SIMD",
              f"  if (ms_isa_level > 0 && sr == {so} && {conds}) {{",
              f"    const int smask = {mask};",
              f"    if (smask != {2 ** n_in - 1}) {{ {packet_tab}[ms_isa_level](rp, args, n, smask); return; }}",
              "  }",
              "#endif"]
    # contiguous / one-scalar loops: simple enough for the compiler to vectorise
    patterns = [tuple(False for _ in range(n_in))]
    patterns += [tuple(j == k for j in range(n_in)) for k in range(n_in)] if n_in > 1 else []
    for pat in patterns:
        cond = " && ".join([f"sr == {so}"] + [
            f"s{_ARGS[k]} == 0" if pat[k] else f"s{_ARGS[k]} == {sizes[k]}" for k in range(n_in)])
        L.append(f"  if ({cond}) {{")
        L.append(f"    {ctype_out} *r = ({ctype_out} *)rp;")
        for k in range(n_in):
            if pat[k]:
                L.append(f"    const {ctypes_in[k]} {_ARGS[k]} = *(const {ctypes_in[k]} *){_ARGS[k]}p;")
            else:
                L.append(f"    const {ctypes_in[k]} *{_ARGS[k].upper()} = (const {ctypes_in[k]} *){_ARGS[k]}p;")
        L.append("    for (i = 0; i < n; ++i) {")
        for k in range(n_in):
            if not pat[k]:
                L.append(f"      const {ctypes_in[k]} {_ARGS[k]} = {_ARGS[k].upper()}[i];")
        L.append(f"      r[i] = {expr};")
        L.append("    }")
        L.append("    return;")
        L.append("  }")
    L.append("  for (i = 0; i < n; ++i) {")
    for k in range(n_in):
        L.append(f"    const {ctypes_in[k]} {_ARGS[k]} = *(const {ctypes_in[k]} *)({_ARGS[k]}p + i * s{_ARGS[k]});")
    L.append(f"    *({ctype_out} *)(rp + i * sr) = {expr};")
    L.append("  }")
    L.append("}")
    return "\n".join(L)


_VMATH_PRIMS = ("add", "sub", "mul", "div", "fma", "max", "min", "abs", "neg", "lt", "gt", "eq",
                "isnan", "sel", "mor", "pow2i", "ldexp", "frexpe", "frexpm", "copysign",
                "bucket", "tab")
_VMATH_TARGET = dict(_TARGET, s="", sw="", sf='__attribute__((target("fma"))) ')


def _vmath_fn(name, arity, body, code, ctype, isa):
    """One vmath body (mshadow/vmath.py) as C for one ISA and type. The scalar member comes
    in two variants on x86 (_vmath_scalar): ``sw`` computes fma in software (scalar.h) and
    ``sf`` is compiled for the FMA instruction; both call scalar.h's other primitives."""
    prim = "s" if isa in ("sw", "sf") else isa
    V, M = f"ms_{prim}_v_{code}", f"ms_{prim}_m_{code}"
    fns = tuple(f[0] for f in vmath.FUNCTIONS)

    def c(expr):
        expr = re.sub(r"\bk\(", f"ms_{prim}_set1_{code}(({ctype})", expr)
        expr = re.sub(r"\btab\((\w+),", lambda m: f"tab({_table_name(m.group(1), code)},", expr)
        expr = re.sub(r"\b(" + "|".join(fns) + r")\(", lambda m: f"ms_{isa}_{m.group(1)}_{code}(", expr)
        if isa == "sf":
            expr = re.sub(r"\bfma\(", f"ms_sf_fma_{code}(", expr)
        return re.sub(r"\b(" + "|".join(_VMATH_PRIMS) + r")\(", lambda m: f"ms_{prim}_{m.group(1)}_{code}(", expr)
    params = ", ".join(f"{V} {a}" for a in "xy"[:arity])
    L = [f"static inline {_VMATH_TARGET[isa]}{V} ms_{isa}_{name}_{code}({params}) {{"]
    declared = set()
    for line in filter(None, (t.strip() for t in body.splitlines())):
        if line.startswith("return "):
            L.append(f"  return {c(line[7:])};")
            continue
        var, expr = (t.strip() for t in line.split("=", 1))
        kind = {"m_": M, "i_": f"ms_{prim}_i_{code}"}.get(var[:2], V)
        decl = "" if var in declared else kind + " "
        declared.add(var)
        L.append(f"  {decl}{var} = {c(expr)};")
    L.append("}")
    return "\n".join(L)


def _vmath_scalar(fns):
    """The scalar member ms_s_<fn>_<code>, which the plain loops, the strided and gathering
    kernels and the SIMD loops' tails call. On x86 it is a switch between two compilations
    of one body: at the AVX2 and AVX-512 levels (whose CPUs have FMA) the one compiled for
    the FMA instruction, else the one with scalar.h's exact software fma (the C library's
    fmaf is a call per fma: it cost a strided exp 3.6x its time). Both round each fma once,
    so they give the same bits. Elsewhere (arm64: fmaf is an instruction) the body itself."""
    out = ["#if MS_X86",
           "static inline __attribute__((target(\"fma\"))) float ms_sf_fma_f32(float a, float b, float c) "
           "{ return __builtin_fmaf(a, b, c); }",
           "static inline __attribute__((target(\"fma\"))) double ms_sf_fma_f64(double a, double b, double c) "
           "{ return __builtin_fma(a, b, c); }"]
    out += fns("sw") + fns("sf")
    for name, arity, bodies in vmath.FUNCTIONS:
        for code, ctype in (("f32", "float"), ("f64", "double")):
            params = ", ".join(f"{ctype} {a}" for a in "xy"[:arity])
            args = ", ".join("xy"[:arity])
            out.append(f"static inline {ctype} ms_s_{name}_{code}({params}) {{ return ms_isa_level >= 2 "
                       f"? ms_sf_{name}_{code}({args}) : ms_sw_{name}_{code}({args}); }}")
    return out + ["#else"] + fns("s") + ["#endif"]


def _is_f32(v):
    return struct.unpack("f", struct.pack("f", v))[0] == v


def _table_name(name, code):
    if name not in vmath.TABLES or code != "f32":
        raise ValueError(f"vmath: no {code} table {name}")   # tables are float32 only
    return f"ms_tab_{name}"


def _vmath():
    out = []
    for name, values in vmath.TABLES.items():   # exact: every value is a float32 (hex literal)
        assert len(values) == 16 and all(_is_f32(v) for v in values), name
        out.append(f"static const float {_table_name(name, 'f32')}[16] = {{"
                   + ", ".join(f"{v.hex()}f" for v in values) + "};")
    def fns(*isas):
        return [_vmath_fn(name, arity, bodies[code], code, ctype, isa) for isa in isas
                for name, arity, bodies in vmath.FUNCTIONS
                for code, ctype in (("f32", "float"), ("f64", "double"))]
    return "\n".join(out + _vmath_scalar(fns) + _per_arch(lambda isas: fns(*isas)))


def _int_helpers(code, ctype):
    unsigned = code.startswith("u")
    # x / 0 -> 0 and INT_MIN / -1 -> INT_MIN (wraps) instead of a SIGFPE that would kill Python.
    neg1 = "" if unsigned else f"  if (b == ({ctype})-1) return ({ctype})(0 - (uint64_t)a);\n"
    return (f"static inline {ctype} ms_idiv_{code}({ctype} a, {ctype} b) {{\n"
            f"  if (b == 0) {{ ms_fpe_flags |= 1; return 0; }}\n{neg1}"
            f"  return ({ctype})(a / b);\n}}\n"
            f"static inline {ctype} ms_ipow_{code}({ctype} a, {ctype} b) {{\n"
            f"  {ctype} r = 1;\n"
            + ("" if unsigned else
               f"  if (b < 0) return (a == 1) ? 1 : (a == ({ctype})-1 ? ((b & 1) ? ({ctype})-1 : 1) : 0);\n")
            + f"  while (b) {{ if (b & 1) r = ({ctype})((uint64_t)r * (uint64_t)a); "
              f"a = ({ctype})((uint64_t)a * (uint64_t)a); b = ({ctype})(b >> 1); }}\n"
            f"  return r;\n}}\n")


def _per_isa(name, ret, sig, body):
    """The same C body compiled as name_plain and once per ISA under its target attribute
    (the compiler vectorises it for each), and the table name_tab[level] that picks one."""
    return [f"static {ret} {name}_plain{sig} {{\n{body}\n}}"] + _per_arch(lambda isas: [
        f"static {_TARGET[isa]}{ret} {name}_{isa}{sig} {{\n{body}\n}}" for isa in isas] + [
        _level_table(f"static {ret} (*const {name}_tab[4]){sig}", f"{name}_plain", isas,
                     lambda isa: f"{name}_{isa}")])


def _implicit_gemm(code, ctype):
    """implicit_dot for one block: out[x] = sum_k A[k] * B[k][x] (dims = {n, K};
    steps = {A along k, B along x, out, B along k}). Both paths add in k order, so they
    agree bit for bit; the contiguous one is a rank-1 update the compiler vectorises, once
    per ISA (the same C under each target attribute)."""
    body = f"""  {ctype} *r = ({ctype} *)R;
  npy_intp x, k;
  for (x = 0; x < n; ++x) r[x] = 0;
  for (k = 0; k < K; ++k) {{
    const {ctype} a = *(const {ctype} *)(A + k * sa);
    const {ctype} *b = (const {ctype} *)(B + k * sbk);
    for (x = 0; x < n; ++x) r[x] = ({ctype})(r[x] + a * b[x]);
  }}"""
    sig = "(const char *A, const char *B, char *R, npy_intp n, npy_intp K, npy_intp sa, npy_intp sbk)"
    out = _per_isa(f"ms_igemm_{code}", "void", sig, body)
    out.append(f"""static void ms_k_implicit_gemm_{code}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{
  const npy_intp n = dims[0], K = dims[1];
  const char *A = args[0], *B = args[1];
  char *R = args[2];
  const npy_intp sa = steps[0], sbx = steps[1], sr = steps[2], sbk = steps[3];
  npy_intp x, k;
  (void)data;
  if (sr == (npy_intp)sizeof({ctype}) && sbx == (npy_intp)sizeof({ctype})) {{
#if MS_SIMD
    ms_igemm_{code}_tab[ms_isa_level](A, B, R, n, K, sa, sbk);
#else
    ms_igemm_{code}_plain(A, B, R, n, K, sa, sbk);
#endif
    return;
  }}
  for (x = 0; x < n; ++x) {{
    {ctype} acc = 0;
    for (k = 0; k < K; ++k)
      acc = ({ctype})(acc + *(const {ctype} *)(A + k * sa) * *(const {ctype} *)(B + k * sbk + x * sbx));
    *({ctype} *)(R + x * sr) = acc;
  }}
}}""")
    return "\n".join(out)


# Fused chains: a run of element-wise instructions where each consumes the previous one's
# result runs as ONE kernel that keeps the running value in SIMD registers (one store per
# element instead of one per operator). Step codes enumerate (op, running value on the
# right, other operand a scalar); unary steps read no operand.
CHAIN_BINARY = ("plus", "minus", "mul", "div", "maximum", "minimum")
CHAIN_UNARY = ("identity", "neg", "abs", "sqrt", "square", "relu", "exp", "log", "log1p", "tanh")
CHAIN_MAX = 8
CHAIN_UNROLL = 8   # vectors per iteration of a chain: amortises the step dispatch


def chain_steps():
    """[(code, op, swap, scalar)]: the step table shared with the plan compiler."""
    out = []
    for op in CHAIN_BINARY:
        for swap in (False, True):
            for scalar in (False, True):
                out.append((len(out), op, swap, scalar))
    for op in CHAIN_UNARY:
        out.append((len(out), op, False, False))
    return out


# The sources the generated header is made from: the header records their hash, and the
# compiled core refuses to import against sources that have changed since (an editable
# install whose ops_table.py was edited without a rebuild would run stale step codes).
GENERATOR_SOURCES = ("ops_table.py", "vmath.py", "readers.py", "codegen_cpu.py", "dtypes.py")


def fingerprint():
    """A short hash of GENERATOR_SOURCES as they are on disk now."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in GENERATOR_SOURCES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read().replace(b"\r\n", b"\n"))
    return h.hexdigest()[:16]


# A binary step whose operand is the value it applies to, op(v, v), as a unary step: x * x
# binds x twice, and squaring the register saves a load per element (the load ports bound a
# sum of squares on AVX2 parts that split 256-bit loads, such as Zen 1).
SELF_STEP = {"mul": "square"}


def chain_self_codes():
    """[code of the unary step equal to op(v, v), or -1] for every step code."""
    code_of = {(op, swap, scalar): c for c, op, swap, scalar in chain_steps()}
    return [code_of.get((SELF_STEP.get(op), False, False), -1) if not scalar else -1
            for _, op, swap, scalar in chain_steps()]


def _chain_step_table():
    rows = [f'  {{"{op}", {int(swap)}, {int(scalar)}}},' for _, op, swap, scalar in chain_steps()]
    return "\n".join(["typedef struct { const char *op; int swap; int scalar; } ms_chain_step;",
                      "/* step code -> what it does; the plan compiler reads codes from here */",
                      "static const ms_chain_step ms_chain_step_table[] = {"] + rows
                     + ["  {NULL, 0, 0}", "};",
                        "/* step code -> the step loads an operand (a binary step on a tensor) */",
                        "static const int ms_chain_step_reads[] = {"
                        + ", ".join(str(int(OPS_BY_NAME[op].arity == 2 and not scalar))
                                    for _, op, swap, scalar in chain_steps()) + "};",
                        "/* step code -> a vmath step (exp, log, ...): see _chain_packet's tail */",
                        "static const int ms_chain_step_vmath[] = {"
                        + ", ".join(str(int(op in _VMATH_NAMES)) for _, op, swap, scalar in chain_steps())
                        + "};",
                        "/* step code -> the unary step equal to it when its operand is the chain's",
                        " * start, op(v, v) (-1: none): see ms_chain_codes */",
                        "static const int ms_chain_self_code[] = {"
                        + ", ".join(map(str, chain_self_codes())) + "};",
                        "/* The step codes of one run of `ch`: a first step that reads the start's",
                        " * own memory again (x * x) applies to the register instead. */",
                        "static inline void ms_chain_codes(const ms_chain *ch, char **args, int *code) {",
                        "  int s;",
                        "  for (s = 0; s < ch->nstep; ++s) code[s] = ch->code[s];",
                        "  if (ch->nstep > 0 && !ch->start_scalar && args[ch->opd[0]] == args[0]",
                        "      && ms_chain_self_code[code[0]] >= 0)",
                        "    code[0] = ms_chain_self_code[code[0]];",
                        "}"])


def _subst(form, names):
    return re.sub(r"\b([ab])\b", lambda m: names[m.group(1)], form)


# SIMD width of each (ISA, code): the lane accumulators of a summing chain are unrolled
_WIDTH = {("sse2", "f32"): 4, ("sse2", "f64"): 2, ("avx2", "f32"): 8, ("avx2", "f64"): 4,
          ("avx512", "f32"): 16, ("avx512", "f64"): 8, ("neon", "f32"): 4, ("neon", "f64"): 2}


def _packet_step(d, isa, code, swap, value, operand):
    """``value = op(value[, operand])`` in ``op``'s packet form at ``isa`` (``operand`` a
    vector expression; ``swap``: the value is the right operand): one chain step on one
    vector, for the unrolled loop, the one-vector tails and the short runs alike."""
    form = re.sub(r"P\((\w+)\)", lambda m: f"ms_{isa}_{m.group(1)}_{code}", d.packet)
    if d.arity == 1:
        return f"{value} = {_subst(form, {'a': value})};"
    names = {"a": operand, "b": value} if swap else {"a": value, "b": operand}
    return f"{value} = {_subst(form, names)};"


def _element_step(d, code, ctype, swap, value, operand):
    """``value = op(value[, operand])`` in ``op``'s C form on one element (``operand`` a C
    expression; ``swap``: the value is the right operand): a chain step for the plain loop
    and the short runs' last elements alike."""
    form = _c_expr(d, code, ctype)
    if d.arity == 1:
        return f"{{ const {ctype} v = {value}; {value} = {_subst(form, {'a': 'v'})}; }}"
    names = {"a": "o", "b": "v"} if swap else {"a": "v", "b": "o"}
    return f"{{ const {ctype} v = {value}, o = {operand}; {value} = {_subst(form, names)}; }}"


def _chain_packet(code, ctype, isa, total=False):
    """A chain's SIMD body for one ISA. The U vectors of an iteration are named variables
    (v0 .. v7), not an array, so they stay in registers across the step dispatch; what is
    left after the last whole iteration goes to ms_chain_short (_chain_short). With
    ``total`` the chain ends in a sum instead of a store: element i goes to lane i % 16
    (REDUCE_LANES) and the block's lanes are added pairwise into args[nin], the order of the
    reduce_sum kernel, with no register between."""
    V, W = f"ms_{isa}_v_{code}", f"ms_{isa}_W_{code}"
    U = CHAIN_UNROLL
    vs = [f"v{u}" for u in range(U)]

    def each(template):   # one statement per vector u
        return " ".join(template(u) for u in range(U))

    # a summing chain streams its operands and stores nothing: it asks for them farther on
    ahead = "MS_PREFETCH_AHEAD_SUM" if total else "MS_PREFETCH_AHEAD"

    def prefetch(ptr):   # the lines of an iteration's operand, `ahead` bytes further on
        # past the block's end too (a contiguous operand's next block); only operands in
        # memory, never registers (ms_chain.fetch)
        nbytes = U * _WIDTH[isa, code] * (4 if code == "f32" else 8)
        return " ".join(f"ms_prefetch((const char *)({ptr}) + {ahead} + {k});"
                        for k in range(0, nbytes, 64))

    name = f"ms_chain_sum_{code}_{isa}" if total else f"ms_chain_{code}_{isa}"
    L = [f"static {_TARGET[isa]}void {name}(const ms_chain *ch, char **args, npy_intp n) {{",
         f"  {ctype} *r = ({ctype} *)args[ch->nin];",
         f"  const {ctype} *S = (const {ctype} *)args[0];",
         f"  {V} bc[{CHAIN_MAX}];",
         "  npy_intp i = 0;",
         "  int s;",
         f"  int code[{CHAIN_MAX}], reads[{CHAIN_MAX}];   /* reads: the step loads its operand "
         "from memory (prefetched) */",
         "  ms_chain_codes(ch, args, code);",
         "  int vm = 0;   /* a vmath step: the tail runs vectorised; else in the plain loops (E1 at",
         "               * n = 16 ran 0.1 us slower in the AVX-512 one (the AVX-512 clock?)) */",
         "  for (s = 0; s < ch->nstep; ++s) vm |= ms_chain_step_vmath[code[s]];",
         "  for (s = 0; s < ch->nstep; ++s)",
         "    reads[s] = ms_chain_step_reads[code[s]] && ch->fetch[s];",
         "  for (s = 0; s < ch->nstep; ++s)   /* every slot set: the dispatch reads bc[s] */",
         f"    bc[s] = ch->scalar[s] ? ms_{isa}_set1_{code}((({ctype} *)args[ch->opd[s]])[0])"
         f" : ms_{isa}_zero_{code}();",
         f"  const {V} b0 = ms_{isa}_set1_{code}(S[0]);",
         f"  for (; i + {U} * {W} <= n; i += {U} * {W}) {{",
         f"    {V} {', '.join(vs)};",
         "    if (ch->start_scalar) { " + each(lambda u: f"v{u} = b0;") + " }",
         "    else { if (ch->fetch_start) { " + prefetch("S + i") + " } "
         + each(lambda u: f"v{u} = ms_{isa}_loadu_{code}(S + i + {u} * {W});") + " }",
         "    for (s = 0; s < ch->nstep; ++s) {",
         f"      const {ctype} *O = (const {ctype} *)args[ch->opd[s]] + i;",
         "      if (reads[s]) { " + prefetch("O") + " }",
         "      const V_BC bs = bc[s];".replace("V_BC", V),
         "      switch (code[s]) {"]
    cases1 = []   # the same dispatch on one vector v0, operand at O (the tail loops)
    for c, op, swap, scalar in chain_steps():
        d = OPS_BY_NAME[op]
        def load(at):
            return "bs" if scalar else f"ms_{isa}_loadu_{code}({at})"
        if op in _VMATH_NAMES:
            one = f"ms_{isa}_{op}1_{code}(&v0);"
        else:
            one = _packet_step(d, isa, code, swap, "v0", load("O"))
        cases1.append(f"          case {c}: {one} break;")
        if op in _VMATH_NAMES:   # out of line: see _chain_vmath_steps
            body = (f"{{ {V} t[{U}] = {{{', '.join(vs)}}}; ms_{isa}_{op}{U}_{code}(t); "
                    + each(lambda u: f"v{u} = t[{u}];") + " }")
        else:
            body = each(lambda u: _packet_step(d, isa, code, swap, f"v{u}",
                                               load(f"O + {u} * {W}")))
        L.append(f"        case {c}: {body} break;")
    def one_vector(start, operand, finish):
        """One vector through the steps: the last full vectors after the unrolled loop, and
        the last partial one (from zero-padded copies), so short tails stay vectorised."""
        return ([f"      {V} v0 = ch->start_scalar ? b0 : ms_{isa}_loadu_{code}({start});",
                 "      for (s = 0; s < ch->nstep; ++s) {",
                 f"        const {ctype} *O = {operand};",
                 "        const V_BC bs = bc[s];".replace("V_BC", V),
                 "        switch (code[s]) {"] + cases1
                + ["        }", "      }", f"      {finish}"])

    if not total:
        L += ["      }", "    }",
              "    " + each(lambda u: f"ms_{isa}_storeu_{code}(r + i + {u} * {W}, v{u});"),
              "  }",
              f"  if (i < n && !vm) {{ ms_chain_short_{code}_{isa}(ch, args, n, i, NULL); return; }}",
              f"  for (; i + {W} <= n; i += {W}) {{"]
        L += one_vector("S + i", f"(const {ctype} *)args[ch->opd[s]] + i",
                        f"ms_{isa}_storeu_{code}(r + i, v0);")
        L += ["  }",
              "  if (i < n) {   /* lanes past n compute on zeros and are not stored */",
              f"    {ctype} pad[MS_CHAIN_MAX + 2][{_WIDTH[isa, code]}];",
              "    const npy_intp m = n - i;",
              "    int l;",
              "    /* only the rows the steps read: the start's and those of steps reading memory */",
              f"    if (!ch->start_scalar) for (l = 0; l < {W}; ++l) pad[0][l] = l < m ? S[i + l] : 0;",
              "    for (s = 0; s < ch->nstep; ++s)",
              "      if (ms_chain_step_reads[code[s]]) {",
              f"        const {ctype} *O = (const {ctype} *)args[ch->opd[s]] + i;",
              f"        for (l = 0; l < {W}; ++l) pad[s + 1][l] = l < m ? O[l] : 0;",
              "      }",
              "    {"]
        L += one_vector("pad[0]", "pad[s + 1]",
                        f"ms_{isa}_storeu_{code}(pad[MS_CHAIN_MAX + 1], v0);")
        L += ["    }",
              "    for (l = 0; l < m; ++l) r[i + l] = pad[MS_CHAIN_MAX + 1][l];",
              "  }",
              "}"]
        return "\n".join(L)
    # lanes: vector u of an iteration (i a multiple of 16) holds lanes (u % NA) * W + k
    NA = REDUCE_LANES // _WIDTH[isa, code]
    lanes = [f"lane{a}" for a in range(NA)]
    L[1:1] = [f"  {V} {', '.join(f'{x} = ms_{isa}_zero_{code}()' for x in lanes)};",
              f"  {ctype} tot[{REDUCE_LANES}];", "  int l;"]
    L += ["      }", "    }",
          "    " + each(lambda u: f"lane{u % NA} = ms_{isa}_add_{code}(lane{u % NA}, v{u});"),
          "  }",
          f"  for (; vm && i + {W} <= n; i += {W}) {{   /* vector i / W: lane (i / W) % {NA} */"]
    L += one_vector("S + i", f"(const {ctype} *)args[ch->opd[s]] + i",
                    f"switch ((i / {W}) % {NA}) {{ "
                    + " ".join(f"case {a}: lane{a} = ms_{isa}_add_{code}(lane{a}, v0); break;"
                               for a in range(NA)) + " }")
    L += ["  }",
          "  " + " ".join(f"ms_{isa}_storeu_{code}(tot + {a} * {W}, lane{a});" for a in range(NA)),
          f"  if (i < n) ms_chain_short_{code}_{isa}(ch, args, n, i, tot);",
          *("  " + x for x in _pairwise("tot", lambda a, b: f"({ctype})({a} + {b})")),
          "  *r = tot[0];",
          "}"]
    return "\n".join(L)


_VMATH_NAMES = frozenset(name for name, arity, _ in vmath.FUNCTIONS if arity == 1)


# vectors of a chain's vmath step evaluated interleaved, by ISA (CHAIN_UNROLL where absent)
VMATH_GROUP = {"sse2": 4, "avx2": 4}


def _chain_vmath_steps(code, isa):
    """A vmath step (exp, log, ...) of a chain applies to the iteration's vectors through
    memory, in a function of its own: inlined, its temporaries would push the chain's
    vectors and lane accumulators out of registers for every step (a sum of squares ran at
    half speed beside an unused exp case)."""
    V = f"ms_{isa}_v_{code}"
    # straight-line, not a loop: the evaluations of a group interleave (each alone is
    # latency-bound), VMATH_GROUP[isa] at a time: with 16 vector registers (SSE2, AVX2) 8
    # interleaved bodies spilled; and a one-vector form for the tails
    g = VMATH_GROUP.get(isa, CHAIN_UNROLL)
    def group(op, u0):
        us = range(u0, u0 + g)
        return (" ".join(f"const {V} a{u} = ms_{isa}_{op}_{code}(t[{u}]);" for u in us)
                + " " + " ".join(f"t[{u}] = a{u};" for u in us))
    return "\n".join(
        f"static {_TARGET[isa]}__attribute__((noinline)) void "
        f"ms_{isa}_{op}{CHAIN_UNROLL}_{code}({V} *t) {{ "
        + " ".join(group(op, u0) for u0 in range(0, CHAIN_UNROLL, g)) + " }\n"
        f"static {_TARGET[isa]}__attribute__((noinline)) void "
        f"ms_{isa}_{op}1_{code}({V} *t) {{ *t = ms_{isa}_{op}_{code}(*t); }}"
        for op in sorted(_VMATH_NAMES & set(CHAIN_UNARY)))


def _chain_short(code, ctype, isa):
    """Elements [i, n) of a chain, fewer than CHAIN_UNROLL vectors: what is left of a block
    after the unrolled loop, or all of a short row (take's rows of 64 float32 are 4 AVX-512
    vectors, which the per-step loops of ms_chain_plain took 2.3x as long over). The k
    whole vectors sit in an array and the m < W elements after them in another; each step
    applies to both (one dispatch a step, not one a vector): the vectors with the unrolled
    loop's packet operations, the elements with ms_chain_plain's C ones, which agree bit
    for bit (IEEE operations, no contraction), so every level gives the same values. Out
    of line, so the unrolled loop keeps its registers. Given ``tot`` (a summing chain)
    element j adds into tot[j % 16] instead of being stored, in element order per lane as
    the unrolled loop's lanes do."""
    V, W, U = f"ms_{isa}_v_{code}", f"ms_{isa}_W_{code}", CHAIN_UNROLL
    ld = f"ms_{isa}_loadu_{code}"
    L = [f"static {_TARGET[isa]}__attribute__((noinline)) void ms_chain_short_{code}_{isa}("
         f"const ms_chain *ch, char **args, npy_intp n, npy_intp i, {ctype} *tot) {{",
         f"  {ctype} *r = ({ctype} *)args[ch->nin] + i;",
         f"  const {ctype} *S = (const {ctype} *)args[0];",
         f"  const npy_intp k = (n - i) / {W}, m = n - i - k * {W};",
         "  npy_intp u, j;",
         "  int s, code[MS_CHAIN_MAX];",
         f"  {V} t[{U}];",
         f"  {ctype} e[{_WIDTH[isa, code]}];",
         "  ms_chain_codes(ch, args, code);",
         "  if (ch->start_scalar) {",
         f"    const {V} b0 = ms_{isa}_set1_{code}(S[0]);",
         "    for (u = 0; u < k; ++u) t[u] = b0;",
         "    for (j = 0; j < m; ++j) e[j] = S[0];",
         "  } else {",
         "    S += i;",
         f"    for (u = 0; u < k; ++u) t[u] = {ld}(S + u * {W});",
         f"    for (j = 0; j < m; ++j) e[j] = S[k * {W} + j];",
         "  }",
         "  for (s = 0; s < ch->nstep; ++s) {",
         f"    const {ctype} *O = (const {ctype} *)args[ch->opd[s]];",
         f"    const {ctype} o0 = O[0];   /* a scalar step's operand */",
         f"    const {V} bs = ms_{isa}_set1_{code}(o0);",
         f"    const {ctype} *Oe = O + i + k * {W};",
         "    O += i;",
         "    switch (code[s]) {"]
    for c, op, swap, scalar in chain_steps():
        d = OPS_BY_NAME[op]
        if op in _VMATH_NAMES:
            vst = f"t[u] = ms_{isa}_{op}_{code}(t[u]);"
        else:
            vst = _packet_step(d, isa, code, swap, "t[u]", "bs" if scalar else f"{ld}(O + u * {W})")
        est = _element_step(d, code, ctype, swap, "e[j]", "o0" if scalar else "Oe[j]")
        L.append(f"      case {c}: for (u = 0; u < k; ++u) {vst} "
                 f"for (j = 0; j < m; ++j) {est} break;")
    L += ["    }", "  }",
          "  if (tot) {",
          f"    for (u = 0; u < k; ++u) {{ {ctype} *q = tot + (i + u * {W}) % {REDUCE_LANES}; "
          f"ms_{isa}_storeu_{code}(q, ms_{isa}_add_{code}({ld}(q), t[u])); }}",
          f"    for (j = 0; j < m; ++j) {{ {ctype} *q = tot + (i + k * {W} + j) % {REDUCE_LANES}; "
          f"*q = ({ctype})(*q + e[j]); }}",
          "  } else {",
          f"    for (u = 0; u < k; ++u) ms_{isa}_storeu_{code}(r + u * {W}, t[u]);",
          f"    for (j = 0; j < m; ++j) r[k * {W} + j] = e[j];",
          "  }",
          "}"]
    return "\n".join(L)


def _chain_plain(code, ctype):
    """Elements [i0, n) step by step on a local accumulator: the loops vectorise, and the
    destination may be read by a later step, so it is written only at the end. Given
    ``lanes`` (a chain ending in a sum) element i is added to lanes[i % 16] instead."""
    L = [f"static void ms_chain_plain_{code}(const ms_chain *ch, char **args, npy_intp n, npy_intp i0, {ctype} *lanes) {{",
         f"  {ctype} acc[MS_CHAIN_BLOCK];",
         f"  {ctype} *r = ({ctype} *)args[ch->nin];",
         "  npy_intp i, m;",
         "  int s;",
         "  for (; i0 < n; i0 += m) {",
         "    m = n - i0 < MS_CHAIN_BLOCK ? n - i0 : MS_CHAIN_BLOCK;",
         f"    const {ctype} *S = (const {ctype} *)args[0];",
         "    for (i = 0; i < m; ++i) acc[i] = ch->start_scalar ? S[0] : S[i0 + i];",
         "    for (s = 0; s < ch->nstep; ++s) {",
         f"      const {ctype} *O = (const {ctype} *)args[ch->opd[s]];",
         f"      const {ctype} o0 = O[0];",
         "      O += i0;",
         "      switch (ch->code[s]) {"]
    for c, op, swap, scalar in chain_steps():
        step = _element_step(OPS_BY_NAME[op], code, ctype, swap, "acc[i]",
                             "o0" if scalar else "O[i]")
        L.append(f"        case {c}: for (i = 0; i < m; ++i) {step} break;")
    L += ["      }", "    }",
          "    if (lanes) {",
          f"      for (i = 0; i < m; ++i) lanes[(i0 + i) % {REDUCE_LANES}] = ({ctype})(lanes[(i0 + i) % {REDUCE_LANES}] + acc[i]);",
          "    } else {",
          "      for (i = 0; i < m; ++i) r[i0 + i] = acc[i];",
          "    }",
          "  }", "}"]
    return "\n".join(L)


def _chain_kernel(code, ctype):
    """chain_<code>: a fused run of steps stored to args[nin]; chain_sum_<code>: the same
    run summed (a reduction's last instruction: one partial sum per block)."""
    def arch(isas):
        out = []
        for isa in isas:
            out += [_chain_vmath_steps(code, isa), _chain_short(code, ctype, isa),
                    _chain_packet(code, ctype, isa), _chain_packet(code, ctype, isa, total=True)]
        for name in (f"ms_chain_{code}", f"ms_chain_sum_{code}"):
            out.append(_level_table(f"static void (*const {name}_tab[4])(const ms_chain *, "
                                    "char **, npy_intp)", "NULL", isas,
                                    lambda isa: f"{name}_{isa}"))
        out.append(_level_table(f"static void (*const ms_chain_short_{code}_tab[4])("
                                f"const ms_chain *, char **, npy_intp, npy_intp, {ctype} *)",
                                "NULL", isas, lambda isa: f"ms_chain_short_{code}_{isa}"))
        out.append("/* elements of one unrolled iteration: a shorter run goes straight to the "
                   "short loop */")
        out.append(_level_table(f"static const npy_intp ms_chain_unrolled_{code}[4]", "0", isas,
                                lambda isa: str(CHAIN_UNROLL * _WIDTH[isa, code])))
        return out
    L = [_chain_plain(code, ctype)] + _per_arch(arch)
    L.append("#if MS_SIMD")
    L.append(f"""/* The level a run of n elements takes: a run shorter than one AVX-512 iteration takes
 * 256-bit vectors. On a 2-core AVX-512 Xeon a statement whose kernels touch 512-bit registers
 * cost 0.1 us more (1.26 -> 1.37 us for E1 at n = 16; the 512-bit width saves a few ns on
 * such a run); every level gives the same bits. */
static inline int ms_chain_level_{code}(npy_intp n) {{
  return ms_isa_level == 3 && n < ms_chain_unrolled_{code}[3] ? 2 : ms_isa_level;
}}""")
    L.append("#endif")
    L.append(f"""static void ms_k_chain_{code}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{
  (void)steps;   /* every operand is contiguous or a scalar: the plan only fuses such runs */
#if MS_SIMD
  const int lv = ms_chain_level_{code}(dims[0]);
  if (lv > 0) {{
    if (dims[0] >= ms_chain_unrolled_{code}[lv])
      ms_chain_{code}_tab[lv]((const ms_chain *)data, args, dims[0]);
    else
      ms_chain_short_{code}_tab[lv]((const ms_chain *)data, args, dims[0], 0, NULL);
    return;
  }}
#endif
  ms_chain_plain_{code}((const ms_chain *)data, args, dims[0], 0, NULL);
}}
static void ms_k_chain_sum_{code}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{
  (void)steps;
#if MS_SIMD
  const int lv = ms_chain_level_{code}(dims[0]);
  if (lv > 0 && dims[0] >= ms_chain_unrolled_{code}[lv]) {{
    ms_chain_sum_{code}_tab[lv]((const ms_chain *)data, args, dims[0]);
    return;
  }}
#endif
  {{
    {ctype} tot[{REDUCE_LANES}];
    int l;
    for (l = 0; l < {REDUCE_LANES}; ++l) tot[l] = 0;
#if MS_SIMD
    if (lv > 0)
      ms_chain_short_{code}_tab[lv]((const ms_chain *)data, args, dims[0], 0, tot);
    else
#endif
    ms_chain_plain_{code}((const ms_chain *)data, args, dims[0], 0, tot);
    {" ".join(_pairwise("tot", lambda a, b: f"({ctype})({a} + {b})"))}
    *({ctype} *)args[((const ms_chain *)data)->nin] = tot[0];
  }}
}}""")
    return "\n".join(L)


def _softmax(code, ctype):
    """softmax_rows_<code>: mshadow's Softmax of each row, in one visit a row while it is in
    cache: its maximum, d = exp(e - max) with the sum in REDUCE_LANES lanes (element i in
    lane i % 16, lanes added pairwise, as the reductions do), then d /= sum. vmath's exp
    and that order give the same bits at every ISA level and in the plain loop. ``d`` may
    be ``e``. numpy's five passes, each over the whole array, took 2.3-2.9x torch's time."""
    out = [_softmax_row(code, ctype, None)] + _per_arch(lambda isas: [
        _softmax_row(code, ctype, isa) for isa in isas] + [
        _level_table(f"static void (*const ms_softmax_row_{code}_tab[4])(const {ctype} *, "
                     f"{ctype} *, npy_intp)", f"ms_softmax_row_{code}_plain", isas,
                     lambda isa: f"ms_softmax_row_{code}_{isa}")])
    out.append(f"""/* rows x cols of e (row step es bytes) into d (ds), on nt threads */
static void ms_softmax_rows_{code}(const char *e, npy_intp es, char *d, npy_intp ds,
                                   npy_intp rows, npy_intp cols, int nt) {{
  npy_intp y;
#if MS_SIMD
  void (*row)(const {ctype} *, {ctype} *, npy_intp) = ms_softmax_row_{code}_tab[ms_isa_level];
#else
  void (*row)(const {ctype} *, {ctype} *, npy_intp) = ms_softmax_row_{code}_plain;
#endif
  (void)nt;
#ifdef _OPENMP
  #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (y = 0; y < rows; ++y) row((const {ctype} *)(e + y * es), ({ctype} *)(d + y * ds), cols);
}}""")
    return "\n".join(out)


# the fused multiply-adds of softmax's division (_softmax_row), by ISA and storage type
_FMA = {("avx2", "f32"): "_mm256_{op}_ps", ("avx2", "f64"): "_mm256_{op}_pd",
        ("avx512", "f32"): "_mm512_{op}_ps", ("avx512", "f64"): "_mm512_{op}_pd"}
# Where the corrected product gives the correctly rounded quotient a / s (no step leaves
# the normal range or the remainder's exactness): a >= the floor, 1 <= s < the ceiling,
# so the quotient is normal (float32: at least 2^-110) and the remainder a - q*s a
# multiple of at least 2^-136, exact. 200 million random pairs of each type agreed with
# division bit for bit.
_QUOTIENT_FLOOR = {"f32": "0x1p-90f", "f64": "0x1p-900"}
_SUM_CEIL = {"f32": "0x1p20f", "f64": "0x1p50"}


def _any_below(isa, code, a, floor):
    """C: whether any lane of vector ``a`` is below ``floor`` (a vector) or NaN."""
    if isa == "avx512":
        return f"_mm512_cmp_{'ps' if code == 'f32' else 'pd'}_mask({a}, {floor}, _CMP_NGE_UQ)"
    return (f"_mm256_movemask_{'ps' if code == 'f32' else 'pd'}(_mm256_cmp_{'ps' if code == 'f32' else 'pd'}"
            f"({a}, {floor}, _CMP_NGE_UQ))")


def _softmax_row(code, ctype, isa):
    """One row's softmax for ``isa`` (None: the plain loop). Each pass runs its whole
    REDUCE_LANES-element groups in vectors, then the rest element by element from where
    they stopped; the plain loop is the same passes with no vectors, so the lanes sum in
    the same order.

    The maximum folds into 4 vectors (one waited on each load's latency; which vector
    holds a value changes no bit: a row with a NaN gives NaNs whatever its maximum). The
    division of AVX2 and AVX-512 is a multiplication by the correctly rounded 1 / sum and
    one fused correction (Markstein's theorem: the correctly rounded quotient, so the same
    bits as dividing), where nothing can underflow: a vector holding a value below
    _QUOTIENT_FLOOR, or a row whose sum is not finite, divides. vdivps took a fifth of a
    row's time (256 x 1000 float32: 1.31x torch's)."""
    L = REDUCE_LANES
    target = _TARGET[isa] if isa else ""
    head = (f"static {target}void ms_softmax_row_{code}_{isa or 'plain'}"
            f"(const {ctype} *e, {ctype} *d, npy_intp n) {{")
    decl = [f"  {ctype} m = ({ctype})-INFINITY, tot[{L}], s;", "  npy_intp i = 0;", "  int l;"]
    vmax, vexp, vdiv = [], [f"  for (l = 0; l < {L}; ++l) tot[l] = 0;"], []
    if isa:
        W, V = _WIDTH[isa, code], f"ms_{isa}_v_{code}"
        NA = L // W
        NM = max(NA, 4)
        f = lambda op: f"ms_{isa}_{op}_{code}"     # noqa: E731
        decl += [f"  {V} acc[{NM}], vm;", "  int u;"]
        vmax = [f"  for (u = 0; u < {NM}; ++u) acc[u] = {f('set1')}(({ctype})-INFINITY);",
                f"  for (; i + {NM * W} <= n; i += {NM * W})",
                f"    for (u = 0; u < {NM}; ++u) acc[u] = {f('max')}(acc[u], {f('loadu')}(e + i + u * {W}));",
                f"  for (; i + {W} <= n; i += {W}) acc[0] = {f('max')}(acc[0], {f('loadu')}(e + i));",
                f"  for (u = 1; u < {NM}; ++u) acc[0] = {f('max')}(acc[0], acc[u]);",
                f"  {f('storeu')}(tot, acc[0]);",
                f"  for (l = 0; l < {W}; ++l) m = tot[l] > m ? tot[l] : m;"]
        vexp = [f"  vm = {f('set1')}(m);",
                f"  for (u = 0; u < {NA}; ++u) acc[u] = {f('zero')}();",
                f"  for (; i + {L} <= n; i += {L})",
                f"    for (u = 0; u < {NA}; ++u) {{",
                f"      const {V} t = {f('exp')}({f('sub')}({f('loadu')}(e + i + u * {W}), vm));",
                f"      {f('storeu')}(d + i + u * {W}, t);",
                "      acc[u] = " + f"{f('add')}(acc[u], t);",
                "    }",
                f"  for (u = 0; u < {NA}; ++u) {f('storeu')}(tot + u * {W}, acc[u]);"]
        fma = _FMA.get((isa, code))
        if fma is None:
            vdiv = [f"  vm = {f('set1')}(s);",
                    f"  for (; i + {W} <= n; i += {W}) {f('storeu')}(d + i, {f('div')}({f('loadu')}(d + i), vm));"]
        else:
            floor = f"{f('set1')}({_QUOTIENT_FLOOR[code]})"
            vdiv = [f"  vm = {f('set1')}(s);",
                    f"  if (s >= 1 && s < {_SUM_CEIL[code]}) {{   /* not: inf or NaN in the row, or a huge sum */",
                    f"    const {V} vy = {f('set1')}(({ctype})1 / s), vf = {floor};",
                    f"    for (; i + {W} <= n; i += {W}) {{",
                    f"      const {V} a = {f('loadu')}(d + i);",
                    f"      if ({_any_below(isa, code, 'a', 'vf')}) {{ {f('storeu')}(d + i, {f('div')}(a, vm)); continue; }}",
                    f"      const {V} q = {f('mul')}(a, vy);",
                    f"      {f('storeu')}(d + i, {fma.format(op='fmadd')}({fma.format(op='fnmadd')}(q, vm, a), vy, q));",
                    "    }",
                    "  }",
                    f"  for (; i + {W} <= n; i += {W}) {f('storeu')}(d + i, {f('div')}({f('loadu')}(d + i), vm));"]
    body = (decl + vmax + ["  for (; i < n; ++i) m = e[i] > m ? e[i] : m;", "  i = 0;"] + vexp
            + [f"  for (; i < n; ++i) {{ const {ctype} t = ms_s_exp_{code}(e[i] - m); d[i] = t; "
               f"tot[i % {L}] += t; }}",
               "  " + " ".join(_pairwise("tot")),
               "  s = tot[0];", "  i = 0;"] + vdiv
            + ["  for (; i < n; ++i) d[i] = d[i] / s;", "}"])
    return "\n".join([head] + body)


def reducer_init(r, code):
    """The C value a fold of reducer row ``r`` (readers.REDUCER_TABLE) starts from, for the
    storage type ``code``: its number; "-inf" / "+inf": -INFINITY / INFINITY for floats,
    the <stdint.h> limits of an integer type (0 for an unsigned one's minimum)."""
    if r.init not in ("-inf", "+inf"):
        return str(r.init)
    cc = compute_code(code)
    if cc in FLOAT_CODES:
        return "-INFINITY" if r.init == "-inf" else "INFINITY"
    v = _CTYPE[cc]
    limit = v[:-2].upper()           # int8_t -> INT8_MIN / INT8_MAX, uint8_t -> 0 / UINT8_MAX
    if r.init == "+inf":
        return limit + "_MAX"
    return "0" if v.startswith("u") else limit + "_MIN"


def reducer_fold(r, code, a="a", b="b"):
    """The C fold of reducer row ``r`` on the compute type of ``code``, of the value held
    ``a`` and the new value ``b``: the row's own ``c``, else its ops_table combine's C form."""
    cc = compute_code(code)
    form = r.c if r.c is not None else _c_expr(OPS_BY_NAME[r.combine], cc, _CTYPE[cc])
    return re.sub(r"\b[ab]\b", lambda m: a if m.group() == "a" else b, form)


def _select_terms(r):
    """The ``&&`` terms of a selecting row's ``c``, ``((take) ? b : a)``, or None (another
    fold, or a take with ``||``)."""
    m = re.fullmatch(r"\(\((.*)\) \? b : a\)", r.c or "")
    if m is None or "||" in m.group(1):
        return None
    return [t.strip() for t in m.group(1).split("&&")]


def reducer_vselect(r, code):
    """reducer_select on the readers' 16-byte vectors VV of the compute type (VSELECT_<NAME>
    (a, b)): a selecting row's ``take`` as lane masks (``&&`` -> ``&``, ``!`` -> ``~``), its
    lanes picked by bits (ms_vpick); any other fold is reducer_fold's C, which vectors take
    as it is."""
    terms = _select_terms(r)
    if terms is None:
        return reducer_fold(r, code, "(a)", "(b)")
    take = " & ".join(f"({t})".replace("!(", "~(") for t in terms)
    return re.sub(r"\b[ab]\b", lambda m: "(a)" if m.group() == "a" else "(b)",
                  f"ms_vpick({take}, a, b)")


def reducer_select(r, code, a="a", b="b"):
    """reducer_fold with no branch on the data (the readers' SELECT_<NAME>): a selecting
    row's ``c``, ``((take) ? b : a)``, on a float type picks one of the two bit patterns
    (gather.h's ms_pick_*) with every operand of ``take``'s ``&&`` evaluated; a float ``?:``
    compiles to a branch, which random data mispredict about half the time. Any other fold
    is reducer_fold's."""
    cc = compute_code(code)
    terms = _select_terms(r)
    if terms is None or cc not in FLOAT_CODES:
        return reducer_fold(r, code, a, b)
    take = " & ".join(f"({t})" for t in terms)
    form = f"ms_pick_{_CTYPE[cc]}({take}, a, b)"
    return re.sub(r"\b[ab]\b", lambda m: a if m.group() == "a" else b, form)


# the scalar comparison that picks the extreme a ``simd`` packet op computes
_SIMD_CMP = {"max": ">", "min": "<"}


REDUCE_LANES = 16


def _pairwise(arr, fold=None):
    """C: the REDUCE_LANES lanes of ``arr`` combined pairwise into arr[0] (lane l with lane
    l + w, w = 8, 4, 2, 1), ``fold(a, b)`` the combine (default a + b). Each step written
    out with a constant count: the compiler keeps the lanes in registers (the loop over w
    went through the stack, a store-forwarding stall a step: 3x a 49-element row's fold)."""
    fold = fold or (lambda a, b: f"{a} + {b}")
    steps, w = [], REDUCE_LANES // 2
    while w > 1:
        steps.append(f"for (l = 0; l < {w}; ++l) {arr}[l] = {fold(f'{arr}[l]', f'{arr}[l + {w}]')};")
        w //= 2
    steps.append(f"{arr}[0] = {fold(f'{arr}[0]', f'{arr}[1]')};")
    return steps


def _reduce_lanes(r, code, ctype):
    """The fold of one block for an arithmetic reducer (``lanes``): element i goes to lane
    i % 16, lanes combined pairwise; the same order for every step, ISA and thread count
    (integers wrap, as in C++). The lanes are independent, so each ISA's compile of the same
    C vectorises it the same way. ms.sum's order."""
    L = REDUCE_LANES
    sig = "(const char *a, npy_intp n, npy_intp sa)"
    # folding the init leaves a lane as it is (a product's 1; a sum's 0: its lanes start
    # at +0, so are never -0), so the tail folds in one vector, zero-padded: rows of 7
    # float32 took 10x the time of the element loop's stores and stalled vector reloads
    pairwise = "\n  ".join(_pairwise("acc", lambda a, b: f"({ctype})({reducer_fold(r, code, a, b)})"))
    body = f"""  {ctype} acc[{L}];
  npy_intp i = 0;
  int l;
  for (l = 0; l < {L}; ++l) acc[l] = {reducer_init(r, code)};
  if (sa == (npy_intp)sizeof({ctype})) {{
    const {ctype} *x = (const {ctype} *)a;
    for (; i + {L} <= n; i += {L})
      for (l = 0; l < {L}; ++l) acc[l] = ({ctype})({reducer_fold(r, code, "acc[l]", "x[i + l]")});
    if (i < n) {{   /* the last m < {L} elements, lane l the (i + l)-th, the others the init */
      const npy_intp m = n - i;
      {ctype} t[{L}];
      for (l = 0; l < {L}; ++l) t[l] = l < m ? x[i + l] : ({ctype})({reducer_init(r, code)});
      for (l = 0; l < {L}; ++l) acc[l] = ({ctype})({reducer_fold(r, code, "acc[l]", "t[l]")});
      i = n;
    }}
  }}
  for (; i < n; ++i) acc[i % {L}] = ({ctype})({reducer_fold(r, code, f"acc[i % {L}]", f"*(const {ctype} *)(a + i * sa)")});
  {pairwise}
  return acc[0];"""
    fn = f"ms_r{r.block}_{code}"
    out = _per_isa(fn, ctype, sig, body)
    out.append(_reduce_entry(r, code, ctype, f"{fn}_tab[ms_isa_level]", f"{fn}_plain"))
    return "\n".join(out)


def _reduce_entry(r, code, ctype, fold, plain):
    """reduce_<block>_<code>: the block fold ``fold`` (``plain`` without SIMD) of each of
    dims[3] rows (1 in a block's call; 256 from _core.reduce_rows), row k's dims[0]
    elements at args[0] + k * dims[4], steps[0] bytes apart, its value to
    args[1] + k * steps[1]: every row folded alone, so any number a call gives the same
    bits. (The fold compiled into a loop of its ISA ran 1.3x slower than called a row.)"""
    return f"""static void ms_k_reduce_{r.block}_{code}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{
  const npy_intp nr = dims[3];
  npy_intp k;
  (void)data;
  for (k = 0; k < nr; ++k) {{
    const char *a = args[0] + k * dims[4];
#if MS_SIMD
    *({ctype} *)(args[1] + k * steps[1]) = {fold}(a, dims[0], steps[0]);
#else
    *({ctype} *)(args[1] + k * steps[1]) = {plain}(a, dims[0], steps[0]);
#endif
  }}
}}"""


def _any_lane(isa, code, m):
    """C: whether any lane of the comparison mask ``m`` (of ms_<isa>_isnan) is set."""
    if isa == "avx512":
        return f"({m}) != 0"
    if isa == "neon":
        return f"ms_neon_any_{code}({m})"
    return f"_mm{'256' if isa == 'avx2' else ''}_movemask_{'ps' if code == 'f32' else 'pd'}({m})"


def _reduce_in_order(r, code, ctype):
    """The fold of one block for a selecting reducer (not ``lanes``): element by element
    from the row's init value (which of +0 / -0 a maximum keeps depends on the order).

    A contiguous float block of maximum or minimum first takes the packets' max / min over
    4 vectors, watching for NaN: with no NaN and an extreme other than zero, that extreme
    is the one value the in-order fold can give. A NaN, or a zero (+0 against -0), takes
    the in-order fold. That fold alone, a branch a value, mispredicted on random data: a
    maximum over rows of 3136 took 8x the time of the sum."""
    # the fold as a macro: an integer's NaN test (a == a) then raises no self-comparison warning
    fn = f"ms_r{r.block}_{code}"
    sig = "(const char *a, npy_intp n, npy_intp sa)"
    out = [f"#define MS_FOLD(a, b) ({reducer_fold(r, code, '(a)', '(b)')})",
           f"""static {ctype} {fn}_in_order{sig} {{
  {ctype} res = ({ctype})({reducer_init(r, code)});
  npy_intp i;
  for (i = 0; i < n; ++i) {{
    const {ctype} v = *(const {ctype} *)(a + i * sa);
    res = MS_FOLD(res, v);
  }}
  return res;
}}"""]
    fold = plain = f"{fn}_in_order"
    if r.simd is not None and code in FLOAT_CODES and compute_code(code) == code:
        op, cmp = r.simd, _SIMD_CMP[r.simd]
        def simd_fold(isa):
            W, V, M = _WIDTH[isa, code], f"ms_{isa}_v_{code}", f"ms_{isa}_m_{code}"
            f = lambda name: f"ms_{isa}_{name}_{code}"     # noqa: E731
            return f"""static {_TARGET[isa]}{ctype} {fn}_{isa}{sig} {{
  const {ctype} *x = (const {ctype} *)a;
  {V} acc[4];
  {M} bad;
  {ctype} part[{W}], m;
  npy_intp i;
  int u, l;
  if (sa != (npy_intp)sizeof({ctype}) || n < {4 * W}) return {fn}_in_order(a, n, sa);
  for (u = 0; u < 4; ++u) acc[u] = {f('loadu')}(x + u * {W});
  bad = {f('mor')}({f('mor')}({f('isnan')}(acc[0]), {f('isnan')}(acc[1])),
                   {f('mor')}({f('isnan')}(acc[2]), {f('isnan')}(acc[3])));
  for (i = {4 * W}; i + {4 * W} <= n; i += {4 * W})
    for (u = 0; u < 4; ++u) {{
      const {V} v = {f('loadu')}(x + i + u * {W});
      acc[u] = {f(op)}(acc[u], v);
      bad = {f('mor')}(bad, {f('isnan')}(v));
    }}
  if ({_any_lane(isa, code, 'bad')}) return {fn}_in_order(a, n, sa);
  acc[0] = {f(op)}({f(op)}(acc[0], acc[1]), {f(op)}(acc[2], acc[3]));
  {f('storeu')}(part, acc[0]);
  m = part[0];
  for (l = 1; l < {W}; ++l) m = part[l] {cmp} m ? part[l] : m;
  for (; i < n; ++i) {{
    if (x[i] != x[i]) return {fn}_in_order(a, n, sa);
    m = x[i] {cmp} m ? x[i] : m;
  }}
  return m != 0 ? m : {fn}_in_order(a, n, sa);
}}"""
        out += _per_arch(lambda isas: [simd_fold(isa) for isa in isas] + [
            _level_table(f"static {ctype} (*const {fn}_tab[4]){sig}", f"{fn}_in_order", isas,
                         lambda isa: f"{fn}_{isa}")])
        fold = f"{fn}_tab[ms_isa_level]"
    out.append(_reduce_entry(r, code, ctype, fold, plain))
    out.append("#undef MS_FOLD")
    return "\n".join(out)


# bytes of one vector of each ISA (the plain path's loops vectorise as SSE2's do)
_VECTOR_BYTES = dict({isa: 4 * _WIDTH[isa, "f32"] for isa in ISAS}, plain=16)


def _acc_kernel(r, code, ctype):
    """acc_<block>_<code>: out = fold(acc, value) a column at a time, for the value's nr rows
    in order (dims[3] of them, dims[4] bytes apart: a grouped run of plan_exec.h passes
    several narrow rows a call; else 1), into the one accumulator row (args[0], which is
    also the output args[2]). The contiguous form keeps 8 vectors of the row in registers
    across the rows, then one vector, then single elements (the compiler vectorises each
    stretch once per ISA): the row is loaded and stored once a call, not once a row. Every
    column folds its rows in order, so any number of rows a call gives the same bits. The
    fold has no branch on the data (reducer_select: the ?: fold branched, and a maximum over
    a leading axis of random data took 8x the sum's time)."""
    fn = f"ms_accrows_{r.block}_{code}"
    sig = f"({ctype} *acc, const char *v, npy_intp n, npy_intp nr, npy_intp rs)"
    # the fold as a macro: an integer's NaN test (a == a) then raises no self-comparison warning
    fold = "MS_ACC_FOLD(a[x], w[x])"
    first = "MS_ACC_FOLD(acc[x0 + x], w[x])"
    size = _compute_size(code)

    def stretch(width):   # columns [x0, x0 + width) over the rows, width a constant
        # each row's stretch nr rows further on is asked for: the row the next call (the
        # group's next rows, or the next group's) reads there (without it a column sum of
        # 4096 x 1024 float32 waited on memory, 1.5x the time; MS_PREFETCH_AHEAD bytes on,
        # one row of 1024 float32, was the row this call read next)
        fetch = " ".join(f"ms_prefetch((const char *)w + ahead + {k});"
                         for k in range(0, max(64, width * size), 64))

        def row(y, dst, value):   # row y of the call folded into the stretch, stored at dst
            return ("    {\n"
                    f"      const {ctype} *w = (const {ctype} *)(v + {y} * rs) + x0;\n"
                    f"      {fetch}\n"
                    # (gcc left a one-vector stretch as 16 scalar adds without the pragma)
                    "      _Pragma(\"omp simd\")\n"
                    f"      for (x = 0; x < {width}; ++x) {dst} = ({ctype})({value});\n"
                    "    }\n")
        # The first row folds acc's stretch as it is loaded and the last stores it (nr >= 2
        # here): copy loops (a[x] = acc[x0 + x] and back) became inlined memcpys of 16-byte
        # moves through the stack, read back as 32-byte vectors, each such load waiting on
        # two stores (no store forwarding): sum_rows of 4096 x 1024 float32, 4 rows a call,
        # took 1.4x a C replica's time
        return (f"  for (; x0 + {width} <= n; x0 += {width}) {{\n"
                f"    {ctype} a[{width}];\n"
                + row(0, "a[x]", first)
                + "    for (y = 1; y < nr - 1; ++y)\n" + row("y", "a[x]", fold)
                + row("(nr - 1)", "acc[x0 + x]", fold)
                + "  }\n")

    def body(isa):
        lanes = max(1, _VECTOR_BYTES[isa] // size)
        return ("  npy_intp x0 = 0, x, y;\n"
                "  const npy_intp ahead = nr * rs;\n"
                "  if (nr == 1) {   /* one row (a wide one): a plain pass, nothing to keep */\n"
                f"    const {ctype} *w = (const {ctype} *)v;\n"
                f"    {ctype} *a = acc;\n"
                "    _Pragma(\"omp simd\")\n"
                f"    for (x = 0; x < n; ++x) a[x] = ({ctype})({fold});\n"
                "    return;\n"
                "  }\n" + stretch(8 * lanes) + stretch(lanes)
                + "  for (; x0 < n; ++x0) {   /* the last columns one at a time */\n"
                f"    {ctype} t = acc[x0];\n"
                "    for (y = 0; y < nr; ++y) {\n"
                f"      const {ctype} *w = (const {ctype} *)(v + y * rs) + x0;\n"
                f"      t = ({ctype})(MS_ACC_FOLD(t, w[0]));\n"
                "    }\n"
                "    acc[x0] = t;\n"
                "  }")
    out = [f"#define MS_ACC_FOLD(a, b) ({reducer_select(r, code, '(a)', '(b)')})",
           f"static void {fn}_plain{sig} {{\n{body('plain')}\n}}"]
    out += _per_arch(lambda isas: [
        f"static {_TARGET[isa]}void {fn}_{isa}{sig} {{\n{body(isa)}\n}}" for isa in isas] + [
        _level_table(f"static void (*const {fn}_tab[4]){sig}", f"{fn}_plain", isas,
                     lambda isa: f"{fn}_{isa}")])
    strided = f"MS_ACC_FOLD(t, *(const {ctype} *)(row + x * sv))"
    out.append(f"""static void ms_k_acc_{r.block}_{code}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{
  const npy_intp n = dims[0], nr = dims[3] > 0 ? dims[3] : 1, rs = dims[4];
  const npy_intp sa = steps[0], sv = steps[1], so = steps[2];
  npy_intp x, y;
  (void)data;
  if (sa == (npy_intp)sizeof({ctype}) && sv == (npy_intp)sizeof({ctype}) && so == sa && args[0] == args[2]) {{
#if MS_SIMD
    {fn}_tab[ms_isa_level](({ctype} *)args[2], args[1], n, nr, rs);
#else
    {fn}_plain(({ctype} *)args[2], args[1], n, nr, rs);
#endif
    return;
  }}
  for (x = 0; x < n; ++x) {{
    {ctype} t = *(const {ctype} *)(args[0] + x * sa);
    for (y = 0; y < nr; ++y) {{
      const char *row = args[1] + y * rs;
      t = ({ctype})({strided});
    }}
    *({ctype} *)(args[2] + x * so) = t;
  }}
}}
#undef MS_ACC_FOLD""")
    return "\n".join(out)


def _reducer_kernels(code, ctype):
    """Per row of readers.REDUCER_TABLE: reduce_<block>_<code> (one block to one value, the
    fused reductions' reducing saver) and acc_<block>_<code> (the column accumulation of a
    fused reduction over leading axes, ir.ACCUMULATORS: _acc_kernel)."""
    out, names = [], []
    for r in readers.REDUCER_TABLE:
        out.append(_acc_kernel(r, code, ctype))
        names.append(f"acc_{r.block}_{code}")
        out.append(_reduce_lanes(r, code, ctype) if r.lanes else _reduce_in_order(r, code, ctype))
        names.append(f"reduce_{r.block}_{code}")
    return out, names


_CTYPE = {c: t for c, t, _ in STORAGE_TYPES}


def _compute_size(code):
    """Bytes of the compute type of storage type ``code`` (the dtype table's)."""
    cc = compute_code(code)
    return next(dt for c, _, dt in COMPUTE_TYPES if c == cc).itemsize


def _reader_types(code):
    """The value type V and the gradient sums' accumulator A of the readers
    (mshadow/readers.py) for a storage type: V its compute type; floats sum in it, integers
    in uint64 (wrapping)."""
    v = _CTYPE[compute_code(code)]
    return v, (v if compute_code(code) in FLOAT_CODES else "uint64_t")


_READER_TYPES = {code: _reader_types(code) for code, _, _ in STORAGE_TYPES}


def _reader_kernel(r, code):
    names = ", ".join(f"{p} = g->p[{k}]" for k, p in enumerate(r.params))
    unused = " ".join(f"(void){p};" for p in r.params)
    body = [f"/* {r.kernel(code)}: {r.doc} */",
            f"static void ms_k_{r.kernel(code)}(char **args, npy_intp const *dims, "
            f"npy_intp const *steps, void *data) {{",
            "  const ms_gather *g = (const ms_gather *)args[0];",
            "  /* rows [dims[1], dims[1] + dims[3]), each columns [x0, x0 + n), row r's output",
            "   * at args[1] + r * dims[4] (plan_exec.h: narrow rows run several a call) */",
            "  const npy_intp n = dims[0], x0 = dims[2], nr = dims[3];",
            "  npy_intp yr;"]
    # the sources' addresses and steps in locals: the stores through ``out`` could alias
    # ``g`` as far as C knows, which would reload them for every element
    body += [f"  const char *const src{k} = g->src[{k}]; const npy_intp rs{k} = g->rowstep[{k}], "
             f"cs{k} = g->colstep[{k}]; (void)src{k}; (void)rs{k}; (void)cs{k};"
             for k in range(len(r.sources))]
    if names:
        body.append(f"  const npy_intp {names};")
    body += [f"  npy_intp i;", f"  (void)steps; (void)data; (void)g; {unused}", "  yr = 0;"]
    if r.rows:
        body.append("  " + r.rows)
    body += ["  for (; yr < nr; ++yr) {",
             "  const npy_intp y = dims[1] + yr;",
             "  char *out = args[1] + yr * dims[4];",
             "  (void)y;"]
    if not r.views:
        return "\n".join(body + _reader_loop(r, code, "sizeof") + ["  }", "}"])
    # a reader whose sources may be strided views: the loop for tensors (the column step a
    # constant, as the index arithmetic of im2col needs to stay fast) and the general one
    dense = " && ".join(f"cs{k} == (npy_intp)sizeof(T)" for k, name in enumerate(r.sources)
                        if name != "index")   # an index is read by IDX: rows only
    body += [f"  if ({dense}) {{"] + _reader_loop(r, code, "sizeof") + ["  } else {"]
    body += _reader_loop(r, code, "cs") + ["  }", "  }", "}"]
    return "\n".join(body)


def _reader_loop(r, code, step):
    """The element loop of a reader's kernel, its LD column step ``step``: "sizeof" (the
    sources' columns contiguous) or "cs" (each source's own column step)."""
    body = ["  {", f"#define CSTEP(k) {'((npy_intp)sizeof(T))' if step == 'sizeof' else 'cs##k'}"]
    if r.row:
        body.append("  " + r.row)
    if step == "sizeof" and r.prefetch:
        body.append("  " + r.prefetch)
    if step == "sizeof" and r.copy:
        body += [f"  {{ const npy_intp crow = {r.copy};",
                 "    if (crow >= 0) { memcpy(out, src0 + crow * rs0 + x0 * (npy_intp)sizeof(T), "
                 "(size_t)n * sizeof(T)); continue; } }"]
    start = "0"
    if step == "sizeof" and r.block:
        body += ["  npy_intp done = 0;", "  " + r.block]
        start = "done"
    body += [f"  for (i = {start}; i < n; ++i) {{",
             "    const npy_intp x = x0 + i;",
             "    V v;",
             "    {",
             "      " + r.elem,
             "    }",
             f"    ms_wr_{code}(out + i * (npy_intp)sizeof(T), v);"]
    if r.next:
        body.append("    " + r.next)
    body += ["    (void)x;", "  }", "#undef CSTEP", "  }"]
    return body


def _readers(names):
    """One kernel per row of mshadow/readers.py and storage type, and their table."""
    out = ["/* ---- readers (mshadow/readers.py): the gather contract of mshadow/gather.h ---- */",
           "#define IDX(k, r) ms_read_index(src##k + (r) * rs##k, g->code[k])",
           "#define BAD_INDEX (ms_gather_error = 1)",
           "#define PREFETCH(k, r, c, cnt) do { const char *pf_ = src##k + (r) * rs##k + (c) * "
           "(npy_intp)sizeof(T); npy_intp pb_ = (cnt) * (npy_intp)sizeof(T), o_; "
           "if (pb_ > 1024) pb_ = 1024; for (o_ = 0; o_ < pb_; o_ += 64) ms_prefetch(pf_ + o_); "
           "} while (0)"]
    entries = []
    for code, ctype, _ in STORAGE_TYPES:
        V, A = _READER_TYPES[code]
        load = "ms_half_to_float(t)" if code == "f16" else "(V)t"
        store = "ms_float_to_half((float)v)" if code == "f16" else "(T)v"
        out += [f"#define T {ctype}", f"#define V {V}", f"#define A {A}",
                "#define ZERO ((V)0)"]
        # each reducer's init value and fold in V (readers._fold_over switches over them)
        for red in readers.REDUCER_TABLE:
            R = red.name.upper()
            out += [f"#define INIT_{R} ((V)({reducer_init(red, code)}))",
                    f"#define FOLD_{R}(a, b) ((V)({reducer_fold(red, code, '(a)', '(b)')}))",
                    f"#define SELECT_{R}(a, b) ((V)({reducer_select(red, code, '(a)', '(b)')}))",
                    f"#define VSELECT_{R}(a, b) ((VV)({reducer_vselect(red, code)}))"]
        out += _small_vectors(code)
        out += _pool_s2(code)
        out += [f"static inline V ms_rd_{code}(const char *p) {{ T t; memcpy(&t, p, sizeof t); "
                f"return {load}; }}",
                f"static inline void ms_wr_{code}(char *p, V v) {{ T t = {store}; "
                f"memcpy(p, &t, sizeof t); }}",
                f"#define LD(k, r, c) ms_rd_{code}(src##k + (r) * rs##k + (c) * CSTEP(k))",
                f"#define ST(i, v) ms_wr_{code}(out + (i) * (npy_intp)sizeof(T), (v))"]
        for r in readers.READERS:
            out.append(_reader_kernel(r, code))
            entries.append(r.kernel(code))
        out += ["#undef T", "#undef V", "#undef A", "#undef ZERO", "#undef LD", "#undef ST",
                "#undef POOL_S2", "#undef VV", "#undef VL", "#undef DENSE_V", "#undef VEVENS"]
        out += [f"#undef {m}_{red.name.upper()}" for red in readers.REDUCER_TABLE
                for m in ("INIT", "FOLD", "SELECT", "VSELECT")]
    out += ["#undef IDX", "#undef BAD_INDEX", "#undef PREFETCH",
            "static const ms_kernel_entry ms_reader_table[] = {"]
    out += [f'  {{"{n}", ms_k_{n}}},' for n in entries]
    out.append("  {NULL, NULL}\n};")
    return "\n".join(out)


_INT_OF_SIZE = {1: "int8_t", 2: "int16_t", 4: "int32_t", 8: "int64_t"}


def _small_vectors(code):
    """C: the readers' 16-byte vectors of V for storage type ``code`` (readers._SMALL_TILE):
    VV, its lane count VL, DENSE_V (a lane is a stored element: its columns are read by
    vector loads) and VEVENS(lo, hi), the even elements of a row whose elements 0..VL-1 are
    ``lo`` and VL-1..2VL-2 ``hi`` (the two loads that read no element past the last even one)."""
    size = _compute_size(code)
    lanes = 16 // size
    evens = ", ".join(str(2 * q if 2 * q < lanes else lanes + 2 * q - lanes + 1)
                      for q in range(lanes))
    return [f"typedef V ms_vv_{code} __attribute__((vector_size(16)));",
            f"typedef {_INT_OF_SIZE[size]} ms_vi_{code} __attribute__((vector_size(16)));",
            f"#define VV ms_vv_{code}", f"#define VL ((npy_intp){lanes})",
            "#define DENSE_V (sizeof(T) == sizeof(V) && CSTEP(0) == (npy_intp)sizeof(T))",
            f"#define VEVENS(lo, hi) MS_VSHUFFLE(lo, hi, ms_vi_{code}, {evens})"]


# pool's stride-2 windows read a dense row at every other element, which the compilers
# vectorize with a shuffle per element (at AVX2 and AVX-512 slower than SSE2's): at
# AVX-512 each window column's elements are first gathered into a dense run by one
# two-register permute per 16 floats (8 doubles), then folded as sx == 1 folds. Every
# reducer row's own FOLD, in the tile's (a, b) order: the same bits as the SSE2 tile.
_POOL_S2_IDX = {"f32": ("_mm512_permutex2var_ps", "_mm512_maskz_loadu_ps", "_mm512_storeu_ps",
                        "__m512",
                        "_mm512_setr_epi32(" + ", ".join(str(2 * i) for i in range(16)) + ")",
                        16, "__mmask16"),
                "f64": ("_mm512_permutex2var_pd", "_mm512_maskz_loadu_pd", "_mm512_storeu_pd",
                        "__m512d",
                        "_mm512_setr_epi64(" + ", ".join(str(2 * i) for i in range(8)) + ")",
                        8, "__mmask8")}


def _pool_s2(code):
    """C: ms_pool_s2_<code>_avx512 and POOL_S2 (readers._WINDOW_TILES) for a float
    storage type (inside its T / V / FOLD_<NAME> macros); POOL_S2 is 0 for the others."""
    if code not in _POOL_S2_IDX:
        return ["#define POOL_S2(...) 0"]
    perm, load, store, vec, idx, L, mask = _POOL_S2_IDX[code]
    fold = readers._each_reducer(
        "for (j = 0; j < mm; ++j) acc[j] = INIT_@;\n"
        "      for (a = ys; a < ye; ++a) for (b = 0; b < kx; ++b) {\n"
        "        const T *p = (const T *)(src + (base + a) * rs) + c0 + b;\n"
        f"        for (j = 0; j < mm; j += {L}) {{   /* elements 2j.. of the run, the needed ones */\n"
        f"          const npy_intp need = 2 * MS_MIN(mm - j, {L}) - 1;\n"
        f"          const {vec} lo = {load}(({mask})(need >= {L} ? ~0u : (1u << need) - 1u), p + 2 * j);\n"
        f"          const {vec} hi = {load}(({mask})(need <= {L} ? 0u : (1u << (need - {L})) - 1u), "
        f"p + 2 * j + {L});\n"
        f"          {store}(u + j, {perm}(lo, {idx}, hi));\n"
        "        }\n"
        "        for (j = 0; j < mm; ++j) acc[j] = FOLD_@(acc[j], u[j]);\n"
        "      }", default="return 0;")
    return ["#if MS_X86 && MS_HAVE_AVX",
            f"static __attribute__((target(\"avx512f\"))) int ms_pool_s2_{code}_avx512("
            "const char *src, npy_intp rs, npy_intp base, npy_intp ys, npy_intp ye, "
            "npy_intp kx, npy_intp c0, npy_intp mm, npy_intp red, char *out) {",
            f"  T acc[64], u[64 + {L}];",
            "  npy_intp a, b, j;",
            "  " + fold,
            "  memcpy(out, acc, (size_t)mm * sizeof(T));",
            "  return 1;",
            "}",
            f"#define POOL_S2 ms_pool_s2_{code}_avx512",
            "#else",
            "#define POOL_S2(...) 0",
            "#endif"]


def _cast_expr(src, dst, dst_ctype):
    if src == dst:
        return "a"
    val = "ms_half_to_float(a)" if src == "f16" else "a"
    if dst == "f16" and src == "f64":
        return "ms_double_to_half(a)"   # one rounding, not two through float
    if dst == "f16":
        return f"ms_float_to_half((float)({val}))"
    return f"({dst_ctype})({val})"


def generate():
    out = ["/* GENERATED by mshadow/codegen_cpu.py from mshadow/ops_table.py: do not edit. */",
           "#ifndef MSHADOW_KERNELS_GEN_H_", "#define MSHADOW_KERNELS_GEN_H_",
           f'#define MS_KERNELS_FINGERPRINT "{fingerprint()}"',
           "#include <math.h>", "#include <stdint.h>", "#include <stddef.h>",
           '#include "mshadow/packet.h"', '#include "mshadow/half.h"',
           '#include "mshadow/gather.h"', "",
           "typedef void (*ms_loop_fn)(char **, npy_intp const *, npy_intp const *, void *);",
           "typedef void (*ms_packet_fn)(char *, char **, npy_intp, int);",
           "static int ms_isa_level = 0;     /* set at import to the detected level */",
           "/* bit 0: an integer division by zero happened. Per thread: the executor clears it",
           " * before a thread runs its share of one program and collects it after, so",
           " * concurrent assignments never see each other's flags. */",
           "#if defined(_MSC_VER)",
           "#define MS_THREAD_LOCAL __declspec(thread)",
           "#else",
           "#define MS_THREAD_LOCAL __thread",
           "#endif",
           "static MS_THREAD_LOCAL int ms_fpe_flags = 0;",
           f"#define MS_CHAIN_MAX {CHAIN_MAX}",
           "#define MS_CHAIN_BLOCK 512",
           "typedef struct {",
           "  int nin;                    /* inputs; the output is args[nin] */",
           "  int nstep;",
           "  int start_scalar;           /* args[0], the starting value, is a scalar */",
           "  int code[MS_CHAIN_MAX];     /* step codes (codegen_cpu.chain_steps) */",
           "  int opd[MS_CHAIN_MAX];      /* the args index each step reads */",
           "  int scalar[MS_CHAIN_MAX];",
           "  /* operands in memory (leaves), prefetched; registers are in L1 already, and a",
           "   * prefetch past one stalled the chain (2-5x slower behind gathers on Zen 1) */",
           "  int fetch_start;",
           "  int fetch[MS_CHAIN_MAX];",
           "} ms_chain;",
           _chain_step_table(),
           ""]
    for code, ctype, _ in COMPUTE_TYPES:
        if code not in FLOAT_CODES:
            out.append(_int_helpers(code, ctype))
    out.append(_vmath())
    names = []
    for op in OPS:
        for code, ctype, _ in COMPUTE_TYPES:
            if kernel_kind(op, code) != "c":
                continue
            tab = None
            if op.packet and code in FLOAT_CODES:
                tab = f"ms_pk_{op.name}_{code}_tab"
                out += _per_arch(lambda isas: [_packet_fn(op, code, ctype, isa) for isa in isas] + [
                    _level_table(f"static const ms_packet_fn {tab}[4]", "NULL", isas,
                                 lambda isa: f"ms_pk_{op.name}_{code}_{isa}")])
            name = f"{op.name}_{code}"
            out.append(_loop_kernel(name, op.arity, [ctype] * op.arity, ctype,
                                    _c_expr(op, code, ctype), tab))
            names.append(name)
    for code, ctype, _ in COMPUTE_TYPES:
        if code not in FLOAT_CODES:
            continue
        out.append(_chain_kernel(code, ctype))
        out.append(_softmax(code, ctype))
        names += [f"chain_{code}", f"chain_sum_{code}"]
    for code, ctype, _ in COMPUTE_TYPES:
        out.append(_implicit_gemm(code, ctype))
        names.append(f"implicit_gemm_{code}")
        kernels, knames = _reducer_kernels(code, ctype)
        out += kernels
        names += knames
    for src, sct, _ in STORAGE_TYPES:
        for dst, dct, _ in STORAGE_TYPES:
            name = f"cast_{src}_{dst}"
            out.append(_loop_kernel(name, 1, [sct], dct, _cast_expr(src, dst, dct)))
            names.append(name)
    out.append("typedef struct { const char *name; ms_loop_fn fn; } ms_kernel_entry;")
    out.append("static const ms_kernel_entry ms_kernel_table[] = {")
    out += [f'  {{"{n}", ms_k_{n}}},' for n in names]
    out.append("  {NULL, NULL}\n};")
    out.append(_readers(names))
    out.append("#endif  /* MSHADOW_KERNELS_GEN_H_ */\n")
    return "\n".join(out)


def write(path):
    write_if_changed(path, generate())


if __name__ == "__main__":
    write(sys.argv[1])
