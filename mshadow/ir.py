"""The typed expression IR: the structure of what an assignment computes.

mshadow evaluates ``dst = exp`` through ``Plan<E>::Eval(y, x)``, one C++ type per node of
the expression. Here each node of that tree is a frozen value, compared and hashed by its
structure, that holds no pointers and no numbers: the tensors and scalar values travel beside it, in the order
``leaves`` gives (binding order). One node therefore stands for every assignment of the
same structure, and together with the device, the destination's dtype and the saver it is
the key of the compiled-plan cache of every backend.

    Leaf(code, transposed)       a tensor read at (y, x), or at (x, y) when transposed
    Scalar()                     a scalar, typed by the operator it feeds
    Map(op, code, *args)         an element-wise operator of ops_table, result stored as code
    Cast(code, arg)              tcast: arg converted to code
    View(code, step[, src])      Remap: a tensor read in place through an affine index map
                                 (the extensions of extension/views.py); ``step`` is how the
                                 last axis is read: 0 unit, 1 zero (one value a row), 2 other.
                                 With ``src``, the map reads the values of that expression
                                 (a gather, implicit_dot, ...), which the lowering stages
    Gather(reader, code, *srcs)  Remap: values from computed addresses, by a reader of
                                 mshadow/readers.py (pad, take, pool, im2col, ...) over its
                                 sources: Leaf and View nodes it reads in place, or any
                                 expression, which the lowering gives a stage
    ImplicitDot(code, lhs, rhs)  sum_k lhs(y, k) * rhs(k, x); lhs and rhs are Leaf nodes (a
                                 tensor or its .T) or 2-D View nodes (a view, or the values
                                 of any expression: View with a source)
    Reduce(code, form, reducer, axis, mask, src)   a reduction (kComplex root)
    Product(kind, code, ltrans, rtrans, lnd, rnd, lsrc, rsrc)  dot / batch_dot (kComplex
                                 root); lsrc/rsrc: an operand's expression, or None

Every node holds its sources, so two assignments share a node exactly when they compute
the same thing (``pool(F(relu, x))`` and ``pool(x)`` differ). A Gather binds one leaf of
its own (its run-time arguments: parameters, shapes, index bound; _gather.pxi GatherArgs)
before the leaves of its sources; a View with a source binds its view before the source's.

Every node is a tuple whose first item is its tag: hashing and equality (one cache lookup
per assignment) run at C speed, and the compiled core builds a node in one allocation.
A tuple cannot cache its hash, so the Map nodes of element-wise expressions are interned
by the identities of their parts, not by hashing: make_map (mshadow/_exp.pxi) finds the
node it would build in a direct-mapped table keyed by the operator, the dtype code and the
children's node objects, and that node's site remembers the plan last found for it. The
table only saves work: a node built elsewhere is a new tuple, equal by its structure.
Walks over the tree are the visitors below (``describe``, ``transposed``, ``leaves``) and
the backends' lowerings (mshadow/lower/cpu.py); none of them index a node by position.
"""
from collections import namedtuple

from .dtypes import BY_CODE
from .readers import REDUCER_TABLE

# THE saver table: how a value is stored into the destination (mshadow's sv::saveto, ...),
# one row each: its name (``ms.sv.<name>``), the element-wise operator that combines the
# old value with the new one (None: the new value replaces it), its operator spelling and
# mshadow's Saver::AlphaBLAS / BetaBLAS (the signs of a matrix product's alpha and beta;
# None: a product cannot be stored with it). ms.sv, the plan compiler, the numpy fallback,
# dot and the tests (mshadow.testing.SAVERS) all read this table: adding a saver is a row.
Saver = namedtuple("Saver", "name op symbol blas")
SAVER_TABLE = (
    Saver("saveto", None, "=", (1, 0)),
    Saver("plusto", "plus", "+=", (1, 1)),
    Saver("minusto", "minus", "-=", (-1, 1)),
    Saver("multo", "mul", "*=", None),
    Saver("divto", "div", "/=", None),
)
SAVERS = {s.name: s.op for s in SAVER_TABLE}       # name -> combining operator
SAVER_BY_NAME = {s.name: s for s in SAVER_TABLE}
SAVER_BLAS = {s.name: s.blas for s in SAVER_TABLE if s.blas is not None}   # -> (sign, beta)
# Reducing savers: the destination receives one partial result per block (mshadow/lower);
# one per row of readers.REDUCER_TABLE, saver -> kernel.
REDUCERS = {r.block: f"reduce_{r.block}" for r in REDUCER_TABLE}
# Accumulating savers, internal to the fused reductions over leading axes: the destination
# row folds in the value's rows (several a call: plan_exec.h's grouped runs), e.g. keeps the
# maximum of itself and the value, NaN propagating (MXNet's red::maximum). Never an ordinary
# saver: a plan for ``dst += x`` and one that accumulates rows are different plans.
ACCUMULATORS = {r.acc: f"acc_{r.block}" for r in REDUCER_TABLE}
assert not set(ACCUMULATORS) & set(SAVERS), "an accumulating saver is an ordinary one"

class Node(tuple):
    """Base of the IR's node types: immutable, equal when their structure is equal."""

    __slots__ = ()
    TAG = None

    def __new__(cls, *fields):
        return tuple.__new__(cls, (cls.TAG,) + fields)

    def __getnewargs__(self):
        return tuple(self[1:])

    def __repr__(self):
        return describe(self)

    @property
    def children(self):
        """The sub-expressions this node reads (empty for leaves)."""
        return ()


class Leaf(Node):
    __slots__ = ()
    TAG = "L"
    code = property(lambda self: self[1])
    transposed = property(lambda self: self[2])


class Scalar(Node):
    __slots__ = ()
    TAG = "S"

    @property
    def code(self):
        raise ValueError("a bare scalar has no dtype (it takes the one of what it meets)")


class Map(Node):
    __slots__ = ()
    TAG = "M"
    op = property(lambda self: self[1])
    code = property(lambda self: self[2])
    args = property(lambda self: self[3:])
    children = args


class Cast(Node):
    __slots__ = ()
    TAG = "C"
    code = property(lambda self: self[1])
    arg = property(lambda self: self[2])
    children = property(lambda self: (self[2],))


class Remap(Node):
    """A source read at transformed coordinates (mshadow's chainer extensions)."""
    __slots__ = ()


class View(Remap):
    __slots__ = ()
    TAG = "V"
    code = property(lambda self: self[1])
    step = property(lambda self: self[2])
    src = property(lambda self: self[3] if len(self) > 3 else None)
    children = property(lambda self: self[3:])


class Gather(Remap):
    __slots__ = ()
    TAG = "X"
    reader = property(lambda self: self[1])
    code = property(lambda self: self[2])
    srcs = property(lambda self: self[3:])
    children = srcs

    @property
    def kernel(self):
        """The generated kernel's name (readers.Reader.kernel)."""
        return f"g_{self[1]}_{self[2]}"


class ImplicitDot(Node):
    __slots__ = ()
    TAG = "G"
    code = property(lambda self: self[1])
    lhs = property(lambda self: self[2])
    rhs = property(lambda self: self[3])
    children = property(lambda self: (self[2], self[3]))


class Reduce(Node):
    """A reduction of ``src`` (kComplex: it is a whole assignment's root, not an operand)."""
    __slots__ = ()
    TAG = "reduce"
    code = property(lambda self: self[1])
    form = property(lambda self: self[2])
    reducer = property(lambda self: self[3])
    axis = property(lambda self: self[4])
    mask = property(lambda self: self[5])
    src = property(lambda self: self[6])


class Product(Node):
    """dot or batch_dot of two (possibly transposed) tensors (kComplex, evaluated by BLAS);
    a 2-D dot also of expressions: ``lsrc``/``rsrc`` is the node of an operand that is an
    expression (None for a tensor), which binds its leaves after the tensors before it."""
    __slots__ = ()
    kind = property(lambda self: self[0])
    code = property(lambda self: self[1])
    ltrans = property(lambda self: self[2])
    rtrans = property(lambda self: self[3])
    lsrc = property(lambda self: self[6])
    rsrc = property(lambda self: self[7])
    children = property(lambda self: tuple(c for c in self[6:] if c is not None))

    def __new__(cls, kind, code, ltrans, rtrans, lnd, rnd, lsrc=None, rsrc=None):
        return tuple.__new__(cls, (kind, code, ltrans, rtrans, lnd, rnd, lsrc, rsrc))

    def __getnewargs__(self):
        return tuple(self)


SCALAR = Scalar()
LEAF = {code: Leaf(code, False) for code in BY_CODE}   # the untransposed tensor leaf of a code

# kComplex roots: evaluated by an engine of their own (engine.register_complex), by tag
COMPLEX_NODES = (Reduce, Product)


# ---- visitors ----------------------------------------------------------------------------

def describe(node):
    """A readable form: plus(Tensor<f32>, mul(scalar, Tensor<f32>.T))."""
    t = type(node)
    if t is Leaf:
        return f"Tensor<{node.code}>" + (".T" if node.transposed else "")
    if t is Scalar:
        return "scalar"
    if t is Cast:
        return f"tcast<{node.code}>({describe(node.arg)})"
    if t is Map:
        return f"{node.op}({', '.join(describe(a) for a in node.args)})"
    if t is ImplicitDot:
        return f"implicit_dot({describe(node.lhs)}, {describe(node.rhs)})"
    if t is View:
        return f"View<{node.code}>" + (f"({describe(node.src)})" if node.src is not None else "")
    if t is Gather:
        return f"{node.reader}<{node.code}>({', '.join(describe(s) for s in node.srcs)})"
    if t is Reduce:
        return f"{node.form}<{node.reducer}>({describe(node.src)})"
    if t is Product:
        srcs = [describe(c) for c in (node.lsrc, node.rsrc) if c is not None]
        return f"{node.kind}<{node.code}>" + (f"({', '.join(srcs)})" if srcs else "")
    return str(node[0])


def holds_remap(node):
    """Whether ``node`` reads through a Remap or an ImplicitDot (a transpose of it then goes
    through the views' index maps, not through the leaves' transpose flags)."""
    t = type(node)
    if t is View or t is Gather or t is ImplicitDot:
        return True
    return any(holds_remap(c) for c in node.children)


def reads_transposed(node):
    """Every tensor leaf of ``node`` (Leaf, Scalar, Map and Cast nodes only) is read
    transposed, and there is at least one: ``transposed(node)`` then reads each tensor in
    its own row order."""
    t = type(node)
    if t is Leaf:
        return node.transposed
    if t is Scalar:
        return None          # (neither: a tree of scalars alone reads nothing)
    if t is Map or t is Cast:
        seen = [reads_transposed(c) for c in node.children]
        return False if False in seen else (True if True in seen else None)
    return False


def transposed(node):
    """The node of ``exp.T`` for a 2-D ``exp`` of Leaf, Scalar, Map and Cast nodes: every
    leaf's transpose flag flipped (``T.T`` is the original)."""
    t = type(node)
    if t is Leaf:
        return Leaf(node.code, not node.transposed)
    if t is Scalar:
        return node
    if t is Cast:
        return Cast(node.code, transposed(node.arg))
    if t is Map:
        return Map(node.op, node.code, *[transposed(a) for a in node.args])
    if t is ImplicitDot:
        raise TypeError("transpose of an expression holding implicit_dot(a, b) is not "
                        "supported; write implicit_dot(b.T, a.T)")
    raise TypeError(f"transpose of an expression holding {describe(node)} is not supported; "
                    f"use ms.transpose_axes on the tensor, or assign it to a tensor first")


def leaves(node, acc=None):
    """The nodes that bind one leaf each, in binding order (an ImplicitDot binds its lhs and
    rhs Leaf nodes; a Gather and a View with a source bind theirs, then their sources'):
    the i-th is read from the expression's ``leaves[i]``."""
    if acc is None:
        acc = []
    t = type(node)
    if t is Leaf:
        acc.append(node)
    elif t is View or t is Gather:   # its own leaf, then its sources' (binding order)
        acc.append(node)
        for c in node.children:
            leaves(c, acc)
    elif t is ImplicitDot:
        leaves(node.lhs, acc)
        leaves(node.rhs, acc)
    else:
        for c in node.children:
            leaves(c, acc)
    return acc


def scalar_count(node):
    """How many scalar values the expression binds."""
    if type(node) is Scalar:
        return 1
    return sum(scalar_count(c) for c in node.children)


class Visitor:
    """Dispatch on the node's type: ``visit(node, *ctx)`` calls ``visit_<Type>``."""

    def visit(self, node, *ctx):
        return getattr(self, "visit_" + type(node).__name__)(node, *ctx)
