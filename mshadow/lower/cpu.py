"""CPU lowering: an IR node (mshadow/ir.py) -> a Program of stages. Pure Python.

Input is an expression's IR node (ops, dtypes, leaf kinds; no pointers, no values), the
destination dtype and the saver; output is a Program that the CPU executor binds to pointers
and scalars. The engine caches programs by (device, node, dst dtype, saver), so this runs
once per structure.

How each node is read:
    Leaf         in place at (y, x), or at (x, y) when transposed       (role 'map')
    View         in place through a row map (extension/views.py)        (role 'view')
    Gather       a reader kernel of gather*.h fills a register per block (role 'gather')
                 from its sources: a tensor ('gsrc') or a 2-D view ('gview') in place, or
                 a stage
    ImplicitDot  a kernel reads whole rows of lhs and columns of rhs     ('gemm_lhs/rhs')
    Map, Cast    a generated kernel per operator; runs of them fuse into one chain
Operands: ('reg', i, code), ('leaf', k, code), ('scalar', s, code), ('dst', 0, code).

Stages (Halide's compute_at): a gather source or a view's source that is an expression is
a producer with a Program of its own, evaluated into scratch that belongs to the run. The
schedule is chosen here, by one rule (docs/architecture.md, "Stages"):
    rows     the reader has a bounds form for that source (readers.Reader.src_rows): each
             band of output rows first evaluates the source box it reads
    columns  the same over bands of output columns (readers.Reader.bands_over_cols)
    whole    otherwise (an index, a source read anywhere, a view's source): evaluated once,
             whole, before anything is stored
    chunk    the source of a reduction (an ir.Reduce root) whose rows are short: evaluated a
             cache-sized chunk at a time into scratch, each chunk reduced as a tensor is
             (reduce_schedule, compile_reduce; extension/reduce.py runs it)
"""
import math
from dataclasses import dataclass, field
from typing import List, Tuple

from .. import ir
from ..codegen_cpu import CHAIN_BINARY, CHAIN_UNARY, CHAIN_MAX
from ..dtypes import BY_CODE, compute_code
from ..ir import ACCUMULATORS, REDUCERS, SAVERS as SAVER_OPS
from ..ops_table import FLOAT_CODES, OPS_BY_NAME, kernel_kind
from ..readers import READERS_BY_NAME, REDUCER_BY_NAME


class UntracedOp(Exception):
    """The node holds an operator with no compiled form (an untraceable defined op)."""


@dataclass
class Instr:
    kernel: Tuple          # ('k', name) a generated kernel, ('chain', code, steps), or
                           # ('fold', name): an accumulating fold, several rows a call
    ins: List[Tuple]
    out: Tuple

    def __str__(self):
        if self.kernel[0] in ("chain", "chain_sum"):
            parts = [_opd(self.ins[0])]
            for op, swap, k in self.kernel[2]:
                o = "_" if k is None else _opd(self.ins[k])
                parts.append(f"{op}(_)" if k is None else
                             (f"{op}({o}, _)" if swap else f"{op}(_, {o})"))
            return f"{_opd(self.out)} = {self.kernel[0]}_{self.kernel[1]}[{' -> '.join(parts)}]"
        return f"{_opd(self.out)} = {self.kernel[1]}({', '.join(_opd(o) for o in self.ins)})"


@dataclass
class Stage:
    """A producer evaluated into scratch before (a band of) its consumer runs."""
    schedule: str          # 'rows', 'columns', 'whole' or 'chunk' (the module docstring)
    consumer: int          # the program leaf it feeds: a gather's, or a view's (-1: the
                           # reduction of a chunk program, compile_reduce)
    pos: int               # the gather's source position it fills (0 for a view)
    program: "Program"     # the producer, compiled for saveto into its own dtype
    leaf_base: int         # its leaves and scalars: a slice of the expression's
    nleaves: int
    scalar_base: int
    nscalars: int


@dataclass
class Program:
    instrs: List[Instr] = field(default_factory=list)
    nreg: int = 0
    reg_codes: List[str] = field(default_factory=list)
    leaf_codes: List[str] = field(default_factory=list)       # storage code of each leaf
    leaf_transposed: List[bool] = field(default_factory=list)
    # how each leaf is read: 'map' (at (y, x), or (x, y) when transposed), 'gemm_lhs' and
    # 'gemm_rhs' (implicit_dot), 'view' (a strided view; leaf_params holds its step kind),
    # 'gather' (read by a gather kernel only)
    leaf_roles: List[str] = field(default_factory=list)
    leaf_params: List[int] = field(default_factory=list)
    scalar_codes: List[Tuple[str, str]] = field(default_factory=list)  # (storage, compute)
    dst_code: str = "f32"
    saver: str = "saveto"
    # the defined operators inlined here, as they were traced: the plan owns what it runs
    user_ops: dict = field(default_factory=dict)
    # the destination may have any column step (strided_dst): every instruction that
    # writes it honours its step
    dst_strided: bool = False
    # binding: program leaf k is the expression's leaves[leaf_bind[k]], scalar slot s its
    # scalars[scalar_bind[s]] (-1: a constant); a staged source binds a slice of its own
    leaf_bind: List[int] = field(default_factory=list)
    scalar_bind: List[int] = field(default_factory=list)
    nbind: int = 0                  # the expression's leaves and scalars this program binds
    nscalar_bind: int = 0
    stages: List[Stage] = field(default_factory=list)
    # per gather leaf k: its sources, ('leaf', program leaf) or ('stage', stage index)
    gather_srcs: dict = field(default_factory=dict)
    # a reduction's chunk program (compile_reduce): (form, reducer, axis, mask) of the
    # ir.Reduce root; its one stage (schedule 'chunk') evaluates the source
    reduce: tuple = None

    def disassemble(self):
        return disassemble(self)


def _opd(o):
    if o[0] == "reg":
        return f"r{o[1]}"
    if o[0] == "leaf":
        return f"L{o[1]}"
    if o[0] == "scalar":
        return f"s{o[1]}"
    return "dst"


def disassemble(program, indent=""):
    """numexpr-style listing of a program, one instruction a line; each stage's program
    first, indented under a line that names its schedule and what it feeds."""
    def leaf(i):
        role, t = program.leaf_roles[i], program.leaf_transposed[i]
        how = "" if role == "map" else f"@{role}"
        if role == "view":
            how += "(" + ("unit", "zero", "strided")[program.leaf_params[i]] + " step)"
        return f"L{i}:{program.leaf_codes[i]}{'.T' if t else ''}{how}"
    head = [f"# dst {program.dst_code} {program.saver}; leaves "
            + ", ".join(leaf(i) for i in range(len(program.leaf_codes)))
            + f"; scalars {', '.join(f's{i}:{c[0]}' for i, c in enumerate(program.scalar_codes))}"
            + f"; {program.nreg} registers"]
    if program.reduce is not None:
        form, reducer, axis, mask = program.reduce
        what = {"except_dim": f"keep axis {axis}", "with_axis": f"axis {axis}",
                "keepdim": f"axis {axis}, kept"}[form]
        head = [f"# dst {program.dst_code} {form}<{reducer}{', mask' if mask else ''}> "
                f"({what}); the source a chunk at a time"]
    lines = [indent + head[0]]
    for j, st in enumerate(program.stages):
        if st.consumer < 0:
            what = "scratch, reduced chunk by chunk"
        elif program.leaf_roles[st.consumer] == "gather":
            what = f"source {st.pos} of L{st.consumer}"
        elif program.leaf_roles[st.consumer] == "scatter":
            what = f"L{st.consumer}, each row added at its index"
        else:
            what = f"the view L{st.consumer}"
        lines.append(f"{indent}stage {j}: {st.schedule}, into {what}")
        lines.append(disassemble(st.program, indent + "    "))
    if program.reduce is not None:
        form, reducer, axis, mask = program.reduce
        row = REDUCER_BY_NAME[reducer]
        red = row.ufunc
        fn = row.arg if mask else f"{red}.reduce"
        lines.append(f"{indent}dst = numpy {fn}(chunk) per chunk"
                     + ("" if mask else f", chunks combined by {red}"
                        + ("" if form == "except_dim"
                           or compute_code(program.dst_code) != program.dst_code else
                           f"; the last axis alone: each row by the block kernel "
                           f"reduce_{row.block}_{program.dst_code} "
                           f"(extension/reduce.py row_kernel)")))
    return "\n".join(lines + [indent + str(i) for i in program.instrs])


def parse_composite(text):
    """'div(1, plus(1, exp(neg(a))))' -> nested tuples ('div', 1.0, ('plus', ...)) / 'a' / 1.0."""
    import ast

    def conv(node):
        if isinstance(node, ast.Call):
            return (node.func.id,) + tuple(conv(a) for a in node.args)
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -conv(node.operand)
        raise ValueError(f"bad composite operator definition {text!r}")
    return conv(ast.parse(text, mode="eval").body)


_COMPOSITES = {op.name: parse_composite(op.composite) for op in OPS_BY_NAME.values() if op.composite}


def read_in_place(reader, src):
    """How a gather reads its source ``src`` (an IR node) in place: 'gsrc' (a tensor), 'gview'
    (a 2-D view; extension/gather.py binds any other view as a staged source), or None: the
    source is an expression, which gets a stage."""
    t = type(src)
    if t is ir.Leaf and not src.transposed:
        return "gsrc"
    if t is ir.View and src.src is None and reader.views:
        return "gview"
    return None


class _Compiler(ir.Visitor):
    def __init__(self, dst_code, saver):
        self.p = Program(dst_code=dst_code, saver=saver)
        self.free = []
        self.pinned = {}   # reg -> count: operands a composite body may still read
        self.consts = {}
        self.nbind = 0     # the expression's leaves and scalars bound so far (tree order)
        self.nscalar = 0

    # registers: freed as soon as their single reader has been emitted
    def reg(self, code):
        if self.free:
            i = self.free.pop()
            self.p.reg_codes[i] = code
        else:
            i = self.p.nreg
            self.p.nreg += 1
            self.p.reg_codes.append(code)
        return ("reg", i, code)

    def release(self, opds):
        for o in opds:
            if o[0] == "reg" and o[1] not in self.free and not self.pinned.get(o[1]):
                self.free.append(o[1])

    def instr(self, kernel, ins, out_code):
        # An element-wise kernel may write over its input only when both have one width:
        # a widening cast in place would overwrite elements it has not read yet.
        same_width = all(BY_CODE[o[2]].size == BY_CODE[out_code].size for o in ins)
        if same_width:
            self.release(ins)
        out = self.reg(out_code)
        if not same_width:
            self.release(ins)
        self.p.instrs.append(Instr(kernel, list(ins), out))
        return out

    def const(self, value, code):
        """A constant of a composite definition: a scalar slot with a fixed value."""
        s = len(self.p.scalar_codes)
        self.p.scalar_codes.append((code, code))
        self.p.scalar_bind.append(-1)
        self.consts[s] = value
        return ("scalar", s, code)

    def leaf(self, code, transposed, role, param=0):
        k = len(self.p.leaf_codes)
        self.p.leaf_bind.append(self.nbind)
        self.nbind += 1
        self.p.leaf_codes.append(code)
        self.p.leaf_transposed.append(transposed)
        self.p.leaf_roles.append(role)
        self.p.leaf_params.append(param)
        return ("leaf", k, code)

    def cast(self, opd, code):
        if opd[2] == code:
            return opd
        return self.instr(("k", f"cast_{opd[2]}_{code}"), [opd], code)

    def computed(self, opd):
        """A stored value as its compute type (float16 is read as float32)."""
        return self.cast(opd, "f32") if opd[2] == "f16" else opd

    # the tree walk: visit(node, ctx) returns the operand holding the node's value, of its
    # compute type; ctx = (storage, compute) code a scalar takes from the operator it feeds
    def visit_Leaf(self, node, ctx):
        return self.computed(self.leaf(node.code, node.transposed, "map"))

    def visit_Gather(self, node, ctx):
        reader = READERS_BY_NAME[node.reader]
        # take_grad: its values are the scatter stage's accumulator, read as a dense leaf;
        # a source read in place is scattered too (copied a band at a time): O(rows) where
        # the gather kernel scans the whole index for every output row
        scatter = reader.scatter
        if scatter:
            opd = self.leaf(compute_code(node.code), False, "scatter")
        else:
            opd = self.leaf(node.code, False, "gather")
        srcs = []
        for pos, src in enumerate(node.srcs):
            how = read_in_place(reader, src)
            if scatter and pos == 0:
                srcs.append(("stage", self.stage(src, "scatter", opd[1], pos,
                                                 compute_code(src.code))))
            elif how is not None:
                srcs.append(("leaf", self.leaf(src.code, False, how)[1]))
            else:
                rows = reader.rows_of(pos)
                schedule = "whole" if rows is None else (
                    "columns" if reader.bands_over_cols else "rows")
                srcs.append(("stage", self.stage(src, schedule, opd[1], pos)))
        self.p.gather_srcs[opd[1]] = srcs
        if scatter:   # (a float16 take_grad's sums are halves, as the gather kernel's)
            return self.cast(self.cast(opd, "f16"), "f32") if node.code == "f16" else opd
        return self.computed(self.instr(("k", node.kernel), [opd], node.code))

    def visit_View(self, node, ctx):
        opd = self.leaf(node.code, False, "view", node.step)
        if node.src is not None:   # a view of an expression's values: they are staged
            self.stage(node.src, "whole", opd[1], 0)
        return self.computed(opd)

    def stage(self, src, schedule, consumer, pos, code=None):
        """Compile the producer ``src`` (into its own dtype, or ``code``) as a stage of the
        program; returns its index."""
        prog = compile_plan(src, code or src.code, "saveto")
        self.p.stages.append(Stage(schedule, consumer, pos, prog, self.nbind, prog.nbind,
                                   self.nscalar, prog.nscalar_bind))
        self.nbind += prog.nbind
        self.nscalar += prog.nscalar_bind
        return len(self.p.stages) - 1

    def visit_ImplicitDot(self, node, ctx):   # the kernel reads rows of lhs, columns of rhs
        lhs = self.gemm_operand(node.lhs, "gemm_lhs")
        rhs = self.gemm_operand(node.rhs, "gemm_rhs")
        return self.instr(("k", f"implicit_gemm_{node.code}"), [lhs, rhs], node.code)

    def gemm_operand(self, node, role):
        """A tensor (or its .T), or a 2-D view read with its two steps: of a tensor in
        place, or of an expression's values, which a whole stage evaluates first."""
        if type(node) is ir.Leaf:
            return self.leaf(node.code, node.transposed, role)
        opd = self.leaf(node.code, False, role)
        if node.src is not None:
            self.stage(node.src, "whole", opd[1], 0)
        return opd

    def visit_Scalar(self, node, ctx):
        s = len(self.p.scalar_codes)
        self.p.scalar_codes.append((ctx[0], ctx[1]))
        self.p.scalar_bind.append(self.nscalar)
        self.nscalar += 1
        return ("scalar", s, ctx[1])

    def visit_Cast(self, node, ctx):
        src_code = node.arg.code
        src = self.visit(node.arg, (src_code, compute_code(src_code)))
        if node.code == "f16":  # round through half so the value is what a half holds
            return self.cast(self.cast(src, "f16"), "f32")
        return self.cast(src, node.code)

    def visit_Map(self, node, ctx):
        code = node.code
        cc = compute_code(code)
        args = [self.visit(a, (code, cc)) for a in node.args]
        res = self.apply(node.op, args, cc)
        if code == "f16":   # mshadow's half_t: every operator's result is a half
            res = self.cast(self.cast(res, "f16"), "f32")
        return res

    def apply(self, name, args, cc):
        """Emit operator ``name`` on operands of compute type ``cc``: a built-in's name, or
        a defined operator (mshadow/op.py UserOp), which the IR node holds with its trace."""
        if not isinstance(name, str):
            if name.tree is None:
                raise UntracedOp(str(name))
            self.p.user_ops[name.name] = (name.arity, name.tree)
            return self.expand(name.tree, args, cc)
        op = OPS_BY_NAME.get(name)
        if op is None:
            raise UntracedOp(name)
        kind = kernel_kind(op, cc)
        if kind == "composite":
            return self.expand(_COMPOSITES[name], args, cc)
        if kind == "via_f64":
            res = self.apply(name, [self.cast(a, "f64") for a in args], "f64")
            return self.cast(res, cc)
        return self.instr(("k", f"{name}_{cc}"), args, cc)

    def expand(self, tree, args, cc):
        """Inline a composite body; its arguments stay live until the body is done,
        since the body may read each of them more than once."""
        regs = [a[1] for a in args if a[0] == "reg"]
        for r in regs:
            self.pinned[r] = self.pinned.get(r, 0) + 1
        res = self._expand(tree, args, cc)
        for r in regs:
            self.pinned[r] -= 1
        self.release([a for a in args if a[0] == "reg" and a != res])
        return res

    def _expand(self, tree, args, cc):
        if isinstance(tree, str):
            return args["abc".index(tree)]
        if isinstance(tree, float):
            return self.const(tree, cc)
        sub = [self._expand(t, args, cc) for t in tree[1:]]
        return self.apply(tree[0], sub, cc)

    def finish(self, res):
        p = self.p
        if p.saver in REDUCERS:   # dst holds one partial per block, of the compute type
            out = self.instr(("k", f"{REDUCERS[p.saver]}_{p.dst_code}"), [res], p.dst_code)
            p.instrs[-1].out = ("dst", 0, p.dst_code)
            return p
        dc = p.dst_code
        cc = compute_code(dc)
        if p.saver in ACCUMULATORS:   # dst (of the compute type) = fold(dst, value's rows)
            last = p.instrs[-1] if p.instrs else None
            if last is not None and last.out == res and last.kernel == ("k", f"identity_{cc}"):
                res = p.instrs.pop().ins[0]   # the fold reads what the copy read (a tensor's sum)
            out = self.instr(("fold", f"{ACCUMULATORS[p.saver]}_{cc}"), [("dst", 0, cc), res], cc)
            p.instrs[-1].out = ("dst", 0, cc)
            return p
        sop = SAVER_OPS[p.saver]
        if sop is None:
            if dc == "f16":
                self.to_dst(self.cast(res, "f16"))
            elif res[0] == "reg" and p.instrs and p.instrs[-1].out == res:
                p.instrs[-1].out = ("dst", 0, dc)
            else:
                self.to_dst(self.instr(("k", f"identity_{cc}"), [res], cc))
        else:
            cur = ("dst", 0, dc)
            if dc == "f16":
                cur = self.cast(("dst", 0, "f16"), "f32")
            out = self.apply(sop, [cur, res], cc)
            if dc == "f16":
                out = self.instr(("k", "cast_f32_f16"), [out], "f16")
            self.to_dst(out)
        return p

    def to_dst(self, res):
        """Redirect the instruction that produced ``res`` to the destination."""
        if res[0] == "reg" and self.p.instrs and self.p.instrs[-1].out == res:
            self.p.instrs[-1].out = ("dst", 0, res[2])
        else:  # a cast of a leaf or scalar that produced no instruction: copy it
            self.p.instrs.append(Instr(("k", f"identity_{res[2]}"), [res], ("dst", 0, res[2])))


_CHAIN_OPS = set(CHAIN_BINARY) | set(CHAIN_UNARY)


def _chain_op(ins, roles, params, transposed):
    """The operator of an instruction a fused chain can take, else None: a generated float
    kernel of the chain table whose operands are all contiguous or scalars."""
    if ins.kernel[0] != "k":
        return None
    op, _, code = ins.kernel[1].rpartition("_")
    if op not in _CHAIN_OPS or code not in FLOAT_CODES:   # the chain kernels' types
        return None
    for o in ins.ins:
        if o[0] == "leaf" and not _chain_readable(roles[o[1]], params[o[1]], transposed[o[1]]):
            return None
    return op


def _chain_readable(role, param, transposed):
    """A chain reads leaves contiguous within a block, or holding one value a block."""
    if role in ("map", "scatter"):
        return not transposed
    return role == "view" and param in (0, 1)


def _reads(instrs, reg, start):
    """How many times instructions from ``start`` read register ``reg`` before it is rewritten."""
    n = 0
    for ins in instrs[start:]:
        n += sum(1 for o in ins.ins if o[0] == "reg" and o[1] == reg)
        if ins.out[0] == "reg" and ins.out[1] == reg:
            break
    return n


def sum_chain(p):
    """A reduction whose value comes out of a chain (or one chainable kernel) sums it as the
    chain computes it: chain_sum, with no block-sized register between the two."""
    if p.saver != "sum" or len(p.instrs) < 2:
        return p
    red, prev = p.instrs[-1], p.instrs[-2]
    r = red.ins[0]
    if r[0] != "reg" or prev.out != r or _reads(p.instrs, r[1], len(p.instrs) - 1) != 1:
        return p
    if prev.kernel[0] == "chain" and prev.kernel[1] == p.dst_code:
        steps, opds = prev.kernel[2], list(prev.ins)
    else:
        op = _chain_op(prev, p.leaf_roles, p.leaf_params, p.leaf_transposed)
        if op is None or prev.out[2] != p.dst_code:
            return p
        opds = [prev.ins[0]] + list(prev.ins[1:])
        steps = ((op, False, 1 if len(prev.ins) == 2 else None),)
    p.instrs[-2:] = [Instr(("chain_sum", p.dst_code, steps), opds, ("dst", 0, p.dst_code))]
    used = [o[1] for ins in p.instrs for o in list(ins.ins) + [ins.out] if o[0] == "reg"]
    p.nreg = max(used) + 1 if used else 0
    return p


# registers a program may hold after gathers_first (the executor keeps 8 on a
# single-threaded run's stack: MS_STACK_REGS in plan_exec.h), and the gathers it moves
# together, leaving a register for the value they join
GATHER_REGS_MAX = 8
GATHER_GROUP = GATHER_REGS_MAX - 1


def gathers_first(p):
    """Emit the gathers of a block before the element-wise work that reads them.

    The tree walk emits a gather where its value is first needed, so one between two
    operators stops them joining one chain: take(i, a * 2 - b) read as take(i, a) * 2 -
    take(i, b) was `r0 = g(a); r0 = mul(r0, s); r1 = g(b); chain[r0 -> minus(_, r1) ..]`,
    and is `r0 = g(a); r1 = g(b); chain[r0 -> mul(_, s) -> minus(_, r1) ..]`: one kernel
    call a block less. Gathers move in groups of GATHER_GROUP, each up to its first gather
    (so a block with at most that many gathers does them all first). A gather reads only
    its own leaf (its sources are read in place or staged before any block runs), so moving
    it earlier changes no value; the registers are renamed (each value once, as in SSA) and
    allocated again in the new order, by the tree walk's rule (an element-wise kernel may
    write over an input only when widths match). Left as it was when nothing moves or the
    new order would need more than GATHER_REGS_MAX registers (and more than before)."""
    roles, instrs = p.leaf_roles, p.instrs

    def is_gather(ins):
        return (ins.kernel[0] == "k" and ins.out[0] == "reg" and len(ins.ins) == 1
                and ins.ins[0][0] == "leaf" and roles[ins.ins[0][1]] == "gather")
    gathers = [t for t, ins in enumerate(instrs) if is_gather(ins)]
    groups = {grp[0]: grp for grp in (gathers[g:g + GATHER_GROUP]
                                      for g in range(0, len(gathers), GATHER_GROUP))}
    moved = set(gathers)
    order = []
    for t in range(len(instrs)):
        if t in groups:
            order += groups[t]
        elif t not in moved:
            order.append(t)
    if order == list(range(len(instrs))):
        return p   # nothing moves
    # values: each instruction's result is a value of its own; operands name the value
    cur, ins_vals, out_vals = {}, [], []
    for t, ins in enumerate(instrs):
        ins_vals.append([cur[o[1]] if o[0] == "reg" else None for o in ins.ins])
        if ins.out[0] == "reg":
            cur[ins.out[1]] = t
        out_vals.append(t if ins.out[0] == "reg" else None)
    last = {}
    for pos, t in enumerate(order):
        for v in ins_vals[t]:
            if v is not None:
                last[v] = pos
    free, reg_of, codes, new = [], {}, [], []

    def release(t, pos):
        for v in ins_vals[t]:
            if v is not None and last[v] == pos and reg_of[v] not in free:
                free.append(reg_of[v])
    for pos, t in enumerate(order):
        ins = instrs[t]
        v = out_vals[t]
        same_width = all(BY_CODE[o[2]].size == BY_CODE[ins.out[2]].size for o in ins.ins)
        if same_width:
            release(t, pos)
        out = ins.out
        if v is not None:
            if free:
                r = free.pop()
                codes[r] = out[2]
            else:
                r = len(codes)
                codes.append(out[2])
            reg_of[v] = r
            out = ("reg", r, out[2])
            if v not in last:   # never read (cannot happen for a gather): free again
                free.append(r)
        if not same_width:
            release(t, pos)
        opds = [o if o[0] != "reg" else ("reg", reg_of[ins_vals[t][k]], o[2])
                for k, o in enumerate(ins.ins)]
        new.append(Instr(ins.kernel, opds, out))
    if len(codes) > max(GATHER_REGS_MAX, p.nreg):
        return p
    p.instrs, p.nreg, p.reg_codes = new, len(codes), codes
    return p


def fuse_chains(p, single=False):
    """Replace each run of instructions where every one consumes only its predecessor's
    result by one chain instruction: the same IEEE operations in the same order, one pass.
    With ``single`` a lone instruction becomes a one-step chain too (a column reduction's
    value ahead of its fold: the chain asks for its leaves' lines ahead, a plain kernel
    does not, and a row of a page, one call each, waited on memory: sum_rows(x * 2) of
    4096 x 1024 float32 took 1.8x the time as a fold; a sum of wide rows now keeps the fold
    in the chain, plusto, but a maximum or minimum has no ordinary saver and still folds)."""
    instrs, out, i = p.instrs, [], 0
    while i < len(instrs):
        first = instrs[i]
        op = _chain_op(first, p.leaf_roles, p.leaf_params, p.leaf_transposed)
        if op is None:
            out.append(first)
            i += 1
            continue
        code = first.out[2]
        opds = [first.ins[0]]
        steps = []
        def add_step(op, swap, other):
            if other is None:
                steps.append((op, False, None))
            else:
                opds.append(other)
                steps.append((op, swap, len(opds) - 1))
        add_step(op, False, first.ins[1] if len(first.ins) == 2 else None)
        prev, j = first, i + 1
        while j < len(instrs) and len(steps) < CHAIN_MAX and len(opds) < CHAIN_MAX:
            nxt = instrs[j]
            nop = _chain_op(nxt, p.leaf_roles, p.leaf_params, p.leaf_transposed)
            r = prev.out
            if nop is None or r[0] != "reg" or nxt.out[2] != code or _reads(instrs, r[1], j) != 1:
                break
            if len(nxt.ins) == 1:
                if nxt.ins[0] != r:
                    break
                add_step(nop, False, None)
            elif nxt.ins[0] == r:
                add_step(nop, False, nxt.ins[1])
            elif nxt.ins[1] == r:
                add_step(nop, True, nxt.ins[0])
            else:
                break
            prev, j = nxt, j + 1
        if len(steps) == 1 and not single:
            out.append(first)
        else:
            out.append(Instr(("chain", code, tuple(steps)), opds, prev.out))
        i = j if len(steps) > 1 or single else i + 1
    p.instrs = out
    used = [o[1] for ins in out for o in list(ins.ins) + [ins.out] if o[0] == "reg"]
    p.nreg = max(used) + 1 if used else 0   # fused programs may need no scratch at all
    return p


# ---- reductions (ir.Reduce roots; extension/reduce.py runs them) --------------------------
# A reduction's source rows (its last axis) at least this long are reduced in registers, in
# the pass that computes them (chain_sum per block of a row, or rows accumulated in
# groups); shorter rows cost a block dispatch each for a few elements (and miss the chain's
# unrolled packet loop), so the source is chunked: evaluated a cache-sized chunk at a time
# into scratch (one long dense run), each chunk reduced as numpy reduces a tensor.
# Measured on a 2-core AVX-512 Xeon, one thread, 2**21 float32 elements, sum_rows(m * 1.0):
# rows of 64: registers 1.39 ms, chunk 1.05; rows of 128: 0.43 and 0.86 (rows of 128 of the
# other dtypes also favour registers).
REGISTER_ROW_MIN = 128
# A source of at most this many rows is reduced in registers whatever their length: a
# chunk's fixed costs (scratch, numpy's reduction of it) outweigh a block dispatch a row.
# Measured on a 2-core AVX-512 EPYC (Zen 4), one thread, float32, the sum over all but axis
# 1 of an identity map of (2, rows / 2, hw), rows of 4 to 100 elements (reduce.py's paths):
# at 8 to 32 rows registers took 0.42-0.49x the chunk's time, at 128 0.60-0.72x, at 512
# 0.84-1.13x, at 2048 0.90-1.79x.
REGISTER_ROWS_FEW = 256


def group_rows_follow(shape, first):
    """Whether the rows a reduction of ``shape`` over the leading axis ``first`` folds into
    one accumulator row follow one another (no axis of size > 1 between ``first`` and the
    last): only then can a call fold several (extension/reduce.py rows_a_call)."""
    n = 1
    for k in shape[first + 1:len(shape) - 1]:
        n *= k
    return n == 1


def reduce_schedule(shape, form, axis, mask):
    """How a reduction of an expression of ``shape`` runs: 'registers' (the source's
    values reduced where they are computed) or 'chunk' (compile_reduce). An arg-reduction
    (``mask``) always chunks: numpy's argmax/argmin takes the chunk. A few rows
    (REGISTER_ROWS_FEW) or long ones (REGISTER_ROW_MIN) go in registers."""
    if mask or not shape:
        return "chunk"
    nd = len(shape)
    if math.prod(shape[:-1]) <= REGISTER_ROWS_FEW:
        return "registers"
    keeps_last = (axis == nd - 1) if form == "except_dim" else (axis != nd - 1)
    first = 0 if form == "except_dim" else axis       # the first reduced axis, if keeps_last
    if keeps_last and group_rows_follow(shape, first):
        # rows folded into accumulator rows, narrow ones several a call (a group's rows
        # follow one another); rows M apart, a call each, are chunked when narrow: 6-65x
        # faster than a kernel call a row of a few elements
        return "registers"
    return "chunk" if shape[-1] < REGISTER_ROW_MIN else "registers"


def compile_reduce(node):
    """The chunk program of the ir.Reduce ``node``: one stage, schedule 'chunk', that
    evaluates the source (compiled for saveto into its own dtype) into scratch, and the
    reduction it feeds (Program.reduce); no instructions of its own."""
    prog = compile_plan(node.src, node.src.code, "saveto")
    p = Program(dst_code=node.code, saver="saveto")
    p.stages.append(Stage("chunk", -1, 0, prog, 0, prog.nbind, 0, prog.nscalar_bind))
    p.reduce = (node.form, node.reducer, node.axis, node.mask)
    p.const_values = {}
    p.nbind, p.nscalar_bind = prog.nbind, prog.nscalar_bind
    p.key = node
    return p


def compile_plan(node, dst_code, saver):
    """Lower the IR ``node`` for a destination of storage ``dst_code`` and a saver name.

    With a reducing saver (ir.REDUCERS) ``dst_code`` names the expression's storage, and the
    destination receives partial results of its compute type. An ir.Reduce root gives its
    chunk program (compile_reduce)."""
    if type(node) is ir.Reduce:
        return compile_reduce(node)
    if not isinstance(node, ir.Node):
        raise TypeError(f"compile_plan: expected an IR node, got {type(node).__name__}")
    if saver not in SAVER_OPS and saver not in REDUCERS and saver not in ACCUMULATORS:
        raise ValueError(f"unknown saver {saver!r} (expected one of {', '.join(SAVER_OPS)})")
    c = _Compiler(dst_code, saver)
    cc = compute_code(dst_code)
    if saver in REDUCERS:
        c.p.dst_code = cc
    res = c.visit(node, (dst_code, cc))
    prog = sum_chain(fuse_chains(gathers_first(c.finish(res)), single=saver in ACCUMULATORS))
    prog.const_values = c.consts
    prog.nbind, prog.nscalar_bind = c.nbind, c.nscalar
    prog.key = node
    return prog


# ---- destinations whose blocks are not contiguous (view targets: a flip of the last axis) --
def _honours_steps(kernel):
    """Whether a kernel reads and writes every operand at its step: the generated
    element-wise, cast and implicit_dot kernels do; a fused chain and a gather write (and a
    chain reads) a contiguous block."""
    if kernel[0] != "k":
        return False
    name = kernel[1]
    return name.startswith(("cast_", "implicit_gemm_")) or name.rpartition("_")[0] in OPS_BY_NAME


def _one_kernel(code, steps, ins, out):
    """A chain of what is left of ``steps``; a single step is its plain kernel again."""
    if len(steps) > 1:
        return Instr(("chain", code, tuple(steps)), ins, out)
    op, swap, k = steps[0]
    args = [ins[0]] if k is None else ([ins[k], ins[0]] if swap else [ins[0], ins[k]])
    return Instr(("k", f"{op}_{code}"), args, out)


def strided_dst(program):
    """A copy of ``program`` that writes a destination whose column step is not its
    element size (a view target whose last axis is reversed: extension/targets.py).

    An instruction that writes the destination with a chain or a gather writes a register
    instead, and one element-wise kernel stores that register at the destination's step:
    with the saver when the chain ended in the saver's step (the only step that reads the
    destination), else a copy. Still one pass, block by block. The engine caches the result
    beside the plain plan (engine.get_plan(..., strided=True))."""
    import copy
    if program.saver in REDUCERS or program.saver in ACCUMULATORS:
        raise ValueError(f"strided_dst: a reducing saver ({program.saver}) writes partial "
                         f"results, not a strided destination")
    p = copy.copy(program)            # new instructions replace old ones, none is changed
    p.reg_codes = list(p.reg_codes)
    p.dst_strided = True
    out = []
    for ins in p.instrs:
        if ins.out[0] != "dst" or _honours_steps(ins.kernel):
            out.append(ins)
            continue
        code = ins.out[2]
        reg = ("reg", p.nreg, code)
        p.nreg += 1
        p.reg_codes[reg[1]:reg[1] + 1] = [code]   # fused programs may keep spare entries
        copy_kernel = f"identity_{code}" if code != "f16" else "cast_f16_f16"
        store = Instr(("k", copy_kernel), [reg], ins.out)
        if ins.kernel[0] == "chain":
            steps, opds = list(ins.kernel[2]), list(ins.ins)
            op, swap, k = steps[-1]
            if k is not None and opds[k][0] == "dst":
                if k != len(opds) - 1:
                    raise ValueError(f"strided_dst: unexpected chain {ins}")
                dst = opds.pop()
                steps.pop()
                store = Instr(("k", f"{op}_{code}"), [dst, reg] if swap else [reg, dst], ins.out)
            if any(o[0] == "dst" for o in opds):
                raise ValueError(f"strided_dst: a chain reads the destination before its "
                                 f"last step: {ins}")
            out.append(_one_kernel(code, steps, opds, reg))
        else:
            out.append(Instr(ins.kernel, list(ins.ins), reg))
        out.append(store)
    p.instrs = out
    return p
