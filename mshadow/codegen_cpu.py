"""Build-time generator of the CPU kernels (kernels_gen.h) from the operator table.

Every kernel has numpy's inner-loop signature ``f(char **args, npy_intp const *dims,
npy_intp const *steps, void *data)`` so the plan executor calls generated kernels and numpy's
own ufunc loops the same way. Float kernels with a packet form get one SIMD body per ISA.
Run by setup.py; ``python -m mshadow.codegen_cpu OUT`` writes the header by hand.
"""
import re
import sys

if __package__:
    from .ops_table import OPS, COMPUTE_TYPES, STORAGE_TYPES, FLOAT_CODES, kernel_kind
else:  # loaded by path from setup.py, before the package is importable
    from ops_table import OPS, COMPUTE_TYPES, STORAGE_TYPES, FLOAT_CODES, kernel_kind

ISAS = ("sse2", "avx2", "avx512")
_TARGET = {"sse2": "", "avx2": '__attribute__((target("avx2"))) ',
           "avx512": '__attribute__((target("avx512f"))) '}
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
             f"  npy_intp i = 0;"]
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
        L += ["#if MS_X86",
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


def _implicit_gemm(code, ctype):
    """implicit_dot for one block: out[x] = sum_k A[k] * B[k][x] (dims = {n, K};
    steps = {A along k, B along x, out, B along k}). Both paths add in k order, so they
    agree bit for bit; the contiguous one is a rank-1 update the compiler vectorises."""
    return f"""static void ms_k_implicit_gemm_{code}(char **args, npy_intp const *dims, npy_intp const *steps, void *data) {{
  const npy_intp n = dims[0], K = dims[1];
  const char *A = args[0], *B = args[1];
  char *R = args[2];
  const npy_intp sa = steps[0], sbx = steps[1], sr = steps[2], sbk = steps[3];
  npy_intp x, k;
  (void)data;
  if (sr == (npy_intp)sizeof({ctype}) && sbx == (npy_intp)sizeof({ctype})) {{
    {ctype} *r = ({ctype} *)R;
    for (x = 0; x < n; ++x) r[x] = 0;
    for (k = 0; k < K; ++k) {{
      const {ctype} a = *(const {ctype} *)(A + k * sa);
      const {ctype} *b = (const {ctype} *)(B + k * sbk);
      for (x = 0; x < n; ++x) r[x] = ({ctype})(r[x] + a * b[x]);
    }}
    return;
  }}
  for (x = 0; x < n; ++x) {{
    {ctype} acc = 0;
    for (k = 0; k < K; ++k)
      acc = ({ctype})(acc + *(const {ctype} *)(A + k * sa) * *(const {ctype} *)(B + k * sbk + x * sbx));
    *({ctype} *)(R + x * sr) = acc;
  }}
}}"""


def _cast_expr(src, dst, dst_ctype):
    if src == dst:
        return "a"
    val = "ms_half_to_float(a)" if src == "f16" else "a"
    if dst == "f16":
        return f"ms_float_to_half((float)({val}))"
    return f"({dst_ctype})({val})"


def generate():
    out = ["/* GENERATED by mshadow/codegen_cpu.py from mshadow/ops_table.py: do not edit. */",
           "#ifndef MSHADOW_KERNELS_GEN_H_", "#define MSHADOW_KERNELS_GEN_H_",
           "#include <math.h>", "#include <stdint.h>", "#include <stddef.h>",
           '#include "mshadow/packet.h"', '#include "mshadow/half.h"', "",
           "typedef void (*ms_loop_fn)(char **, npy_intp const *, npy_intp const *, void *);",
           "typedef void (*ms_packet_fn)(char *, char **, npy_intp, int);",
           "static int ms_isa_level = 0;     /* set at import to the detected level */",
           "static int ms_fpe_flags = 0;     /* bit 0: an integer division by zero happened */",
           ""]
    for code, ctype, _ in COMPUTE_TYPES:
        if code not in FLOAT_CODES:
            out.append(_int_helpers(code, ctype))
    names = []
    for op in OPS:
        for code, ctype, _ in COMPUTE_TYPES:
            if kernel_kind(op, code) != "c":
                continue
            tab = None
            if op.packet and code in FLOAT_CODES:
                out.append("#if MS_X86")
                for isa in ISAS:
                    out.append(_packet_fn(op, code, ctype, isa))
                tab = f"ms_pk_{op.name}_{code}_tab"
                out.append(f"static const ms_packet_fn {tab}[4] = {{NULL, "
                           + ", ".join(f"ms_pk_{op.name}_{code}_{isa}" for isa in ISAS) + "};")
                out.append("#endif")
            name = f"{op.name}_{code}"
            out.append(_loop_kernel(name, op.arity, [ctype] * op.arity, ctype,
                                    _c_expr(op, code, ctype), tab))
            names.append(name)
    for code, ctype, _ in COMPUTE_TYPES:
        out.append(_implicit_gemm(code, ctype))
        names.append(f"implicit_gemm_{code}")
    for src, sct, _ in STORAGE_TYPES:
        for dst, dct, _ in STORAGE_TYPES:
            name = f"cast_{src}_{dst}"
            out.append(_loop_kernel(name, 1, [sct], dct, _cast_expr(src, dst, dct)))
            names.append(name)
    out.append("typedef struct { const char *name; ms_loop_fn fn; } ms_kernel_entry;")
    out.append("static const ms_kernel_entry ms_kernel_table[] = {")
    out += [f'  {{"{n}", ms_k_{n}}},' for n in names]
    out.append("  {NULL, NULL}\n};")
    out.append("#endif  /* MSHADOW_KERNELS_GEN_H_ */\n")
    return "\n".join(out)


def write(path):
    text = generate()
    try:
        with open(path) as f:
            if f.read() == text:
                return  # unchanged: keep the timestamp so nothing rebuilds
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    write(sys.argv[1])
