# Expression nodes and their construction (included by _core.pyx).
#
# The node classes live here, compiled, because building `-eta * (g + lam * w)` is on the
# per-assignment path: each node records its IR node (mshadow/ir.py), shape, dtype code,
# leaves and scalars as it is built (TypeCheck and ShapeCheck happen here), in well under a
# microsecond. mshadow/expr.py holds the public functions (F, tcast, transpose, where) around
# them. This file imports only the layers below it (ir, dtypes, ops_table): nothing above
# the core calls back into it.

import numbers
from .dtypes import CODE_BY_FLAG as _DT_CODE_BY_FLAG, NP_BY_CODE as _DT_NP_BY_CODE, \
    FLOAT_CODES as _DT_FLOAT_CODES
from .ir import Map as _IRMap, Gather as _IRGather, View as _IRView, LEAF as _IR_LEAF, \
    SCALAR as _IR_SCALAR, describe as _describe
from .ops_table import OPS_BY_NAME as _OPS_BY_NAME
from .errors import LazyExpressionError, MissingMethodError

cimport cython
from cpython.object cimport PyTypeObject
from cpython.tuple cimport PyTuple_SET_ITEM, PyTuple_New, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.ref cimport Py_INCREF, PyObject

cdef extern from "Python.h":
    ctypedef object (*_allocfunc)(PyTypeObject *, Py_ssize_t)
    ctypedef void *_PyObjectPtr "PyObject *"
    ctypedef object (*_newfunc)(PyTypeObject *, object, _PyObjectPtr)
    void _incref "Py_INCREF"(PyObject *)
    void _decref "Py_DECREF"(PyObject *)
    ctypedef struct _TypeAlloc "PyTypeObject":
        _allocfunc tp_alloc
        _newfunc tp_new
    int PY_VERSION_HEX
    # (as the C API declares them: no exception check, the caller asks PyErr_Occurred)
    Py_ssize_t _long_as_ssize "PyLong_AsSsize_t"(PyObject *) noexcept
    PyObject *_err_occurred "PyErr_Occurred"() noexcept
    void _err_clear "PyErr_Clear"() noexcept

cdef object _tuple_new = tuple.__new__


cdef inline void _tuple_put(tuple t, Py_ssize_t i, object item) noexcept:
    """Item ``i`` of a tuple just made by PyTuple_New (a new reference to ``item``)."""
    Py_INCREF(item)
    PyTuple_SET_ITEM(t, i, item)


cdef object _new_map_node(object name, str code, tuple keys):
    """ir.Map(name, code, *keys)."""
    return _new_ir_node(_IRMap, "M", name, code, keys)


cdef object _new_ir_node(object cls, str tag, object f1, object f2, tuple keys):
    """The IR node ``cls`` = (tag, f1, f2, *keys) (Map, Gather and View have two fields
    before their children), allocated at once through the type's tp_alloc (public C API):
    tuple.__new__ on a subclass builds a temporary tuple and copies it, which made
    building an expression node half again as slow. From CPython 3.14 a tuple caches its
    hash in a field only tuple's own constructors initialise (zeroed memory would read as
    a cached hash of 0), so there it goes through tuple.__new__."""
    cdef Py_ssize_t n = len(keys), i
    if PY_VERSION_HEX >= 0x030E0000:
        return _tuple_new(cls, (tag, f1, f2) + keys)
    node = (<_TypeAlloc *> <PyTypeObject *> cls).tp_alloc(<PyTypeObject *> cls, n + 3)
    _tuple_put(<tuple> node, 0, tag)     # (a tuple subclass: the cast checks nothing)
    _tuple_put(<tuple> node, 1, f1)
    _tuple_put(<tuple> node, 2, f2)
    for i in range(n):
        _tuple_put(<tuple> node, i + 3, keys[i])
    return node


cdef object _tuple_of(object cls, tuple items):
    """A ``cls`` (a tuple subclass with no fields of its own: Shape) holding ``items``,
    allocated at once as _new_ir_node allocates a node."""
    cdef Py_ssize_t n = len(items), i
    if PY_VERSION_HEX >= 0x030E0000:
        return _tuple_new(cls, items)
    t = (<_TypeAlloc *> <PyTypeObject *> cls).tp_alloc(<PyTypeObject *> cls, n)
    for i in range(n):
        _tuple_put(<tuple> t, i, items[i])
    return t


cdef inline object _new_exp(object cls):
    """An instance of ``cls`` (Exp or a subclass of it, compiled or Python) by its tp_new
    alone: Exp and its subclasses have no __init__, and ``cls()`` or ``Exp.__new__(cls)``
    are Python calls (a fifth of building a gather node)."""
    return (<_TypeAlloc *> <PyTypeObject *> cls).tp_new(<PyTypeObject *> cls, (), NULL)


cdef tuple _CODE_BY_FLAG = _DT_CODE_BY_FLAG
cdef tuple _LEAF_KEY = tuple(_IR_LEAF[c] for c in _CODE_BY_FLAG)
cdef object _SCALAR_KEY = _IR_SCALAR
cdef dict _NP_BY_CODE = _DT_NP_BY_CODE
cdef frozenset _FLOAT_CODES = _DT_FLOAT_CODES
# the float codes as the dtype table's objects: the codes an expression carries are these,
# so a float scalar's check is an identity test (the set is still asked for any other)
cdef tuple _FLOAT_CODE_OBJS = tuple(c for c in _CODE_BY_FLAG if c in _DT_FLOAT_CODES)


cdef inline bint _same_shape(object a, object b) except -1:
    """a == b for two shapes: equal dims are mostly the same int objects (ints up to 256
    are shared), so compare items by identity first; a tuple compare otherwise."""
    cdef Py_ssize_t i, n
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        n = PyTuple_GET_SIZE(a)
        if n != PyTuple_GET_SIZE(b):
            return False
        for i in range(n):
            if PyTuple_GET_ITEM(a, i) != PyTuple_GET_ITEM(b, i):
                return a == b
        return True
    return a == b


cdef inline bint _is_float_code(str code) except -1:
    cdef Py_ssize_t i
    for i in range(len(_FLOAT_CODE_OBJS)):
        if PyTuple_GET_ITEM(_FLOAT_CODE_OBJS, i) == <PyObject *> code:
            return True
    return code in _FLOAT_CODES
DEF kMapper = 1
DEF OPD_TENSOR = 0     # make_map's kinds of operand
DEF OPD_EXP = 1
DEF OPD_SCALAR = 2
DEF kChainer = 3
DEF kComplex = 7


class ScalarExp:
    """``scalar(v)``: a constant; it takes the dtype of what it meets unless given one."""

    __slots__ = ("value", "dtype")
    exp_type = kMapper

    def __init__(self, value, dtype=None):
        if not isinstance(value, (numbers.Number, np.number)) or isinstance(value, complex):
            raise TypeError(f"scalar() takes a real number, got {value!r}")
        self.value = value
        self.dtype = None if dtype is None else np.dtype(dtype)

    def __repr__(self):
        return f"scalar({self.value!r}{'' if self.dtype is None else ', ' + self.dtype.name})"

    # a scalar meeting an expression builds the same nodes a Python number would
    def __add__(self, o): return make_map("plus", (self, o))
    def __radd__(self, o): return make_map("plus", (o, self))
    def __sub__(self, o): return make_map("minus", (self, o))
    def __rsub__(self, o): return make_map("minus", (o, self))
    def __mul__(self, o):
        if getattr(o, "exp_type", 0) == kComplex:
            return NotImplemented   # dot(a, b) folds a scalar into its alpha itself
        return make_map("mul", (self, o))

    def __rmul__(self, o): return make_map("mul", (o, self))
    def __truediv__(self, o): return make_map("div", (self, o))
    def __rtruediv__(self, o): return make_map("div", (o, self))
    def __neg__(self): return make_map("neg", (self,))


cdef object _ScalarExp = ScalarExp


def _fold(name, args):
    """Evaluate an operator on scalars only, at build time (a constant subtree)."""
    dtypes = {a.dtype for a in args if isinstance(a, ScalarExp) and a.dtype is not None}
    vals = [a.value if isinstance(a, ScalarExp) else a for a in args]
    if len(dtypes) > 1:
        raise DTypeError(f"{name}: scalars of different dtypes {sorted(d.name for d in dtypes)}")
    if dtypes:
        dt = dtypes.pop()
        res = _OPS_BY_NAME[name].ref(*[np.asarray(v, dtype=dt) for v in vals])
        return ScalarExp(np.asarray(res, dtype=dt).item(), dt)
    with np.errstate(all="ignore"):
        res = _OPS_BY_NAME[name].ref(*[np.asarray(v) for v in vals])
    return np.asarray(res).item()


cdef object _fold_fn = _fold


@cython.freelist(32)
cdef class Exp:
    """Base of every lazy expression: ``exp_type`` is kMapper, kChainer or kComplex."""
    # (the free list: a statement such as -eta * (g + lam * w) makes and drops three map
    # nodes, which then skip the allocator; it serves the kinds of Exp's own size)
    # (its fields: key, shape, code, leaves, scalars, exp_type, in _core.pxd)
    __array_ufunc__ = None   # numpy scalars and arrays defer to our operators: stay lazy

    @property
    def dtype(self):
        """The numpy dtype the expression evaluates to."""
        return np.dtype(_NP_BY_CODE[self.code])

    @property
    def ndim(self):
        """Number of dimensions of the result."""
        return len(self.shape)

    def __add__(self, o):
        return make_map("plus", (self, o))

    def __radd__(self, o):
        return make_map("plus", (o, self))

    def __sub__(self, o):
        return make_map("minus", (self, o))

    def __rsub__(self, o):
        return make_map("minus", (o, self))

    def __mul__(self, o):
        return make_map("mul", (self, o))

    def __rmul__(self, o):
        return make_map("mul", (o, self))

    def __truediv__(self, o):
        return make_map("div", (self, o))

    def __rtruediv__(self, o):
        return make_map("div", (o, self))

    def __neg__(self):
        return make_map("neg", (self,))

    def __pos__(self):
        return self

    def __richcmp__(self, o, int opc):
        return make_map(_CMP_NAMES[opc], (self, o))

    def __pow__(self, o, mod):
        return make_map("power", (self, o))

    def __rpow__(self, o, mod):
        return make_map("power", (o, self))

    def __abs__(self):
        return make_map("abs", (self,))

    def __matmul__(self, o):
        return dot(self, o)

    def __rmatmul__(self, o):
        return dot(o, self)

    def __hash__(self):   # by identity, though == builds an expression (like numpy arrays)
        return id(self) >> 4

    def __bool__(self):
        raise LazyExpressionError("the truth value of a lazy expression is undefined; "
                                  "assign it to a tensor first")

    def __array_function__(self, func, types, args, kwargs):
        raise LazyExpressionError(f"numpy.{func.__name__} cannot read a lazy expression "
                                  f"({_describe(self.key)}); assign it to a tensor first "
                                  f"(t[:] = exp), then call numpy on t. "
                                  + _lazy_fix(self, f"numpy.{func.__name__}(out)"))

    def __array__(self, dtype=None, copy=None):
        raise LazyExpressionError(f"numpy cannot read a lazy expression ({_describe(self.key)}); "
                                  f"assign it to a tensor first (t[:] = exp), then use "
                                  f"np.asarray(t) or numpy's reductions on t. "
                                  + _lazy_fix(self, "np.asarray(out)"))

    # The error paths of a forgotten `[:]` (`y = a + b`, then y[0], float(y), y.numpy()):
    # each says what y is and what to write. __getattr__ runs only when the normal lookup
    # has failed; a read that succeeds costs about 1.5 ns more from Python (CPython does not
    # specialise attribute reads of a type with a custom tp_getattro), and none from C.
    def __getitem__(self, key):
        raise LazyExpressionError(f"y[{_key_text(key)}]: a lazy expression is not subscriptable "
                                  f"(it holds no values). "
                                  + _lazy_fix(self, f"out[{_key_text(key)}]"))

    def __float__(self):
        raise LazyExpressionError("float(y): a lazy expression holds no values. "
                                  + _lazy_fix(self, "float(out[0])"))

    def __int__(self):
        raise LazyExpressionError("int(y): a lazy expression holds no values. "
                                  + _lazy_fix(self, "int(out[0])"))

    def __complex__(self):
        raise LazyExpressionError("complex(y): a lazy expression holds no values. "
                                  + _lazy_fix(self, "complex(out[0])"))

    def __getattr__(self, name):
        raise _attribute_error(self, name)

    @property
    def T(self):
        """The transpose of a 2-D expression (``T()``)."""
        return _up_transpose(self)

    def __repr__(self):
        return (f"{type(self).__name__}({_describe(self.key)}, shape={self.shape}, "
                f"dtype={self.code})")


def scale_value(v, str code, where, what="expression"):
    """A scale as mshadow's ``DType scale``: a real number; for integer types an integer,
    wrapped as C's conversion to DType wraps (so -1 scales a uint8 result by 255)."""
    if isinstance(v, _ScalarExp):
        if v.dtype is not None and _CODE_BY_FLAG[_type_flag(v.dtype)] != code:
            raise DTypeError(f"{where}: scalar of dtype {v.dtype} scales a {what} of dtype "
                             f"{np.dtype(_NP_BY_CODE[code])}; use ms.tcast")
        v = v.value
    if (isinstance(v, (bool, np.bool_, complex, np.complexfloating))
            or not isinstance(v, (numbers.Real, np.number))):
        raise TypeError(f"{where}: a {what} can only be scaled by a real scalar, got {v!r}")
    if code not in _FLOAT_CODES:
        if not float(v).is_integer():
            raise DTypeError(f"{where}: scale {v!r} is not representable in "
                             f"{np.dtype(_NP_BY_CODE[code])} (integer {what}s take integer "
                             f"scales)")
        return _wrap(int(v), code)
    return float(v)


cdef object _wrap(object v, str code):
    """The integer ``v`` wrapped into the range of the integer dtype ``code``."""
    info = np.iinfo(_NP_BY_CODE[code])
    return (v - int(info.min)) % (1 << info.bits) + int(info.min)


cdef class ScaledExp(Exp):
    """A kComplex expression with a scale that ``* s``, ``s *`` and ``-`` fold into (dot's
    alpha, a reduction's scale) instead of nesting; chains multiply: ``e * 2 * 3`` has 6."""

    _extra = ()              # a subclass's own fields, copied into each scaled node
    _what = "expression"     # for messages: "product", "reduction"

    def _scaled(self, s):
        node = type(self).__new__(type(self))
        for f in ("key", "shape", "code", "leaves", "scalars", "exp_type") + self._extra:
            setattr(node, f, getattr(self, f))
        # the same IR node (a scale is not part of it): an interned node keeps its site, and
        # so what the site decided for that node (a reduction's recipe: the scale is applied
        # when the values are finished)
        (<Exp> node).site = self.site
        s = scale_value(s, self.code, self.key[0], self._what)
        node.scale = (_wrap(self.scale * s, self.code) if self.code not in _FLOAT_CODES
                      else self.scale * s)
        node.scalars = (node.scale,)
        return node

    def __mul__(self, o):
        if isinstance(o, (numbers.Real, np.number, _ScalarExp)) and not isinstance(o, bool):
            return self._scaled(o)
        return Exp.__mul__(self, o)    # refuses: a kComplex operand cannot be nested

    def __rmul__(self, o):
        if isinstance(o, (numbers.Real, np.number, _ScalarExp)) and not isinstance(o, bool):
            return self._scaled(o)
        return Exp.__rmul__(self, o)

    def __neg__(self):
        return self._scaled(-1)


# Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE
cdef tuple _CMP_NAMES = ("lt", "le", "eq", "ne", "gt", "ge")


# ---- errors that teach: what to write instead ----------------------------------------
# numpy (and torch) methods that Tensor and expressions do not have: what to call instead.
# "{t}" is the receiver's name in the message.
cdef dict _METHOD_HINTS = {
    "sum": "ms.sum({t}) for the whole sum (a numpy scalar; on an expression it is fused, "
           "no temporary), or ms.reduce_with_axis({t}, axis, ms.red.sum) for one axis",
    "reshape": "ms.reshape({t}, shape), a lazy view: assign it (out[:] = ms.reshape({t}, "
               "shape)) or use it inside an expression",
    "mean": "ms.sum({t}) / {t}.shape.size()",
    "max": "ms.reduce_with_axis({t}, axis, ms.red.maximum) for one axis",
    "min": "ms.reduce_with_axis({t}, axis, ms.red.minimum) for one axis",
    "argmax": "ms.reduce_with_axis({t}, axis, ms.red.maximum, mask=True) (the index, "
              "stored in an integer tensor)",
    "argmin": "ms.reduce_with_axis({t}, axis, ms.red.minimum, mask=True) (the index, "
              "stored in an integer tensor)",
    "astype": "ms.tcast(ms.float64, {t}) (lazy: assign it to a tensor of that dtype)",
    "transpose": "{t}.T for a 2-D transpose, or ms.transpose_axes({t}, axes)",
    "flatten": "ms.reshape({t}, (n,)), a view",
    "ravel": "ms.reshape({t}, (n,)), a view",
    "view": "ms.reshape({t}, shape), a view",
    "fill": "{t}[:] = value",
    "dot": "ms.dot(a, b) (BLAS), assigned: c[:] = ms.dot(a, b)",
    "clip": "ms.F(ms.op.clip, {t}, lo, hi)",
    "exp": "ms.F(ms.op.exp, {t})",
    "log": "ms.F(ms.op.log, {t})",
    "abs": "abs({t})",
    "numel": "{t}.shape.size()",
}
# the numpy functions that read a tensor in place (Tensor.__array_function__)
cdef frozenset _NUMPY_READS = frozenset(("sum", "mean", "max", "min", "argmax", "argmin",
                                         "ravel", "clip", "exp", "log", "abs"))


cdef str _key_text(object key):
    """An index key as the user wrote it: 0, 1:3, ..."""
    if isinstance(key, tuple):
        return ", ".join(_key_text(k) for k in key)
    if isinstance(key, slice):
        return ":".join("" if v is None else repr(v) for v in (key.start, key.stop)) + (
            "" if key.step is None else f":{key.step!r}")
    return "..." if key is Ellipsis else repr(key)


cdef str _lazy_fix(object e, str use):
    """How to get values out of the lazy expression ``e``: what a forgotten ``[:]`` needs."""
    try:
        shape = tuple(e.shape)
        dt = e.dtype.name
        what = f"{_describe(e.key)} of shape {shape}, {dt}"
    except Exception:   # an expression without a usable key or dtype
        shape, dt, what = "shape", "float32", "an expression"
    return (f"y is a lazy expression ({what}): `y = a + b` only builds it, and nothing is "
            f"computed until it is assigned into a tensor with [:]. Write the values into a "
            f"tensor first: out = ms.new_tensor({shape}, dtype=ms.{dt}); out[:] = y "
            f"(or, when y is already a tensor, y[:] = a + b instead of y = a + b); then "
            f"{use}")


cdef object _attribute_error(object obj, str name):
    """The AttributeError for ``obj.name`` that was not found (Tensor and Exp
    ``__getattr__``): a numpy method's mshadow spelling, or, for an expression, the [:] it
    needs for a tensor's attribute; Python's own message otherwise."""
    cls = type(obj).__name__
    if not name.startswith("_"):
        hint = _METHOD_HINTS.get(name)
        is_exp = isinstance(obj, Exp)
        if hint is not None:
            t = "y" if is_exp else "t"
            msg = f"{cls} has no method .{name}() (a numpy array has); write {hint.format(t=t)}"
            if not is_exp and name in _NUMPY_READS:
                msg += f"; numpy's functions read a tensor in place too: np.{name}(t)"
            return MissingMethodError(msg, name=name, obj=obj)
        if is_exp and hasattr(Tensor, name):
            # the message is written when it is read: hasattr(y, "numpy") stays cheap
            return MissingMethodError(_LazyText(f"y.{name}: {cls} is not a Tensor. ",
                                                obj, f"out.{name}"), name=name, obj=obj)
    return AttributeError(f"'{cls}' object has no attribute '{name}'", name=name, obj=obj)


class _LazyText:
    """An exception's message, ``head`` + _lazy_fix(e, use), composed when it is printed."""

    __slots__ = ("head", "e", "use")

    def __init__(self, head, e, use):
        self.head, self.e, self.use = head, e, use

    def __str__(self):
        return self.head + _lazy_fix(self.e, self.use)

    def __repr__(self):
        return repr(str(self))



cdef class MapExp(Exp):
    """An element-wise operator ``op`` applied to ``args`` (mshadow's ``MapExp``)."""

    @property
    def op(self):
        """A built-in operator's name, or a defined operator (op.UserOp)."""
        return self.map_op

    @property
    def args(self):
        """The operands: expressions, tensors and scalars."""
        return self.map_args


cdef class UnaryMapExp(MapExp):
    """``F<op>(a)``: a one-argument operator."""
    pass


cdef class BinaryMapExp(MapExp):
    """``F<op>(a, b)`` and ``a + b``, ``a * b``, ...: a two-argument operator."""
    pass


cdef class TernaryMapExp(MapExp):
    """``F<op>(a, b, c)``: a three-argument operator (``where``, ``clip``)."""
    pass


cdef class TypecastExp(Exp):
    """``tcast<DType>(src)``: ``src`` converted element-wise."""
    cdef public object src


cdef class TransposeExp(Exp):
    """``src.T()``: the transpose of a 2-D ``src``."""
    cdef public object src


cdef inline bint _is_num(object x):
    cdef type t = type(x)
    return t is float or t is int or (
        isinstance(x, (int, float, np.number)) and not isinstance(x, (complex, np.complexfloating)))


cdef inline bint _is_scalar_arg(object x):
    return _is_num(x) or isinstance(x, _ScalarExp)


cdef object _scalar_value(object v, str code, str where):
    """A Python scalar as the value a scalar of storage ``code`` holds; refuse lossy ones."""
    if code in _FLOAT_CODES:
        return float(v)
    if isinstance(v, (float, np.floating)):
        if not float(v).is_integer():
            raise DTypeError(f"{where}: scalar {v!r} is not representable in "
                             f"{np.dtype(_NP_BY_CODE[code])} (use ms.tcast to compute in a "
                             f"floating type)")
    v = int(v)
    info = np.iinfo(_NP_BY_CODE[code])
    if not info.min <= v <= info.max:
        raise OverflowError(f"{where}: scalar {v} out of bounds for {info.dtype} "
                            f"[{info.min}, {info.max}]")
    return v


cdef object _operand(object a, str where):
    if isinstance(a, (Tensor, Exp)):
        return a
    if isinstance(a, np.ndarray):
        return from_numpy(a)
    raise TypeError(f"{where}: cannot use {type(a).__name__} {a!r} in an expression "
                    f"(expected a Tensor, an expression, a numpy array or a real scalar)")


cpdef object chained(object x):
    """``x`` as an operand of another expression: a kComplex expression that has a chainer
    form (reduce_with_axis, reduce_keepdim: ``as_chainer``) becomes it; anything else is
    returned as it is (a kComplex one is then refused where it is used)."""
    if isinstance(x, Exp) and (<Exp> x).exp_type == kComplex:
        fn = getattr(x, "as_chainer", None)
        if fn is not None:
            c = fn()
            if c is not None:
                return c
    return x


cdef tuple _arrays_as_tensors(tuple args):
    out = []
    for x in args:
        out.append(from_numpy(x) if isinstance(x, np.ndarray) else x)
    return tuple(out)


# ---- interned Map nodes -----------------------------------------------------------------
# An expression's IR node keys the plan cache, and a tuple cannot cache its hash: each
# statement's lookup hashed and compared its whole tree, and built it first (together a
# third of `w[:] = -eta * (g + lam * w)` at n = 16). So make_map looks the node it would
# build up in a direct-mapped table, by the identities of its parts (operator, dtype code,
# the children's nodes): a structure built again gets the same node object, in a few
# compares, and that node's _Site remembers the plan the last statement found for it
# (_assign). A slot taken by another structure is overwritten: the table only saves work,
# and nodes built apart still compare equal by their structure. Only nodes of built-in
# operators over leaves, scalars and interned nodes enter it: a defined operator lives no
# longer than the expressions and plans that use it. The table is emptied whenever the
# plan cache drops entries (_evict, clear_plan_cache), with the plans the sites remember.
DEF SITE_SLOTS = 4096           # a power of 2

cdef class _Site:
    """An interned Map node and the plan last found for it: the plan cache's entry under
    (node, code, saver, device) while ``gen`` is the cache's generation (_plan_gen)."""
    cdef object node
    cdef object plan, code, saver, device
    cdef unsigned long long gen


cdef inline bint _interned_exp(object s):
    """``s`` is an expression whose node is its site's (interned)."""
    return (isinstance(s, Exp) and (<Exp> s).site is not None
            and (<_Site> (<Exp> s).site).node is (<Exp> s).key)


cdef list _sites = [None] * SITE_SLOTS
# gather nodes over interned expressions, in a table of their own (_gather.pxi _GatherSite)
DEF GATHER_SITE_SLOTS = 1024    # a power of 2
cdef list _gather_sites = [None] * GATHER_SITE_SLOTS
# reduction nodes over interned sources and tensors (_reduce.pxi _ReduceSite)
DEF REDUCE_SITE_SLOTS = 1024    # a power of 2
cdef list _reduce_sites = [None] * REDUCE_SITE_SLOTS


cdef void _clear_sites() noexcept:
    cdef Py_ssize_t i
    for i in range(SITE_SLOTS):
        _sites[i] = None
    for i in range(GATHER_SITE_SLOTS):
        _gather_sites[i] = None
    for i in range(REDUCE_SITE_SLOTS):
        _reduce_sites[i] = None


cdef inline size_t _mix(size_t h, void *p) noexcept:
    h = (h ^ (<size_t> p >> 4)) * <size_t> 0x9E3779B97F4A7C15ULL
    return h ^ (h >> 29)


cdef _Site _site_of(object name, str code, Py_ssize_t n, PyObject **keys):
    """The _Site of Map(name, code, *keys): the slot's when it holds that node, else a new
    one in its place (the node built here, in one allocation)."""
    cdef size_t h = _mix(_mix(0, <PyObject *> name), <PyObject *> code)
    cdef Py_ssize_t i
    for i in range(n):
        h = _mix(h, keys[i])
    cdef Py_ssize_t slot = <Py_ssize_t> (h & (SITE_SLOTS - 1))
    cdef _Site site = <_Site> _sites[slot]
    cdef tuple node
    if site is not None:
        node = <tuple> site.node
        if (PyTuple_GET_SIZE(node) == n + 3 and PyTuple_GET_ITEM(node, 1) == <PyObject *> name
                and PyTuple_GET_ITEM(node, 2) == <PyObject *> code):
            for i in range(n):
                if PyTuple_GET_ITEM(node, i + 3) != keys[i]:
                    break
            else:
                return site
    site = _Site.__new__(_Site)
    site.node = _map_node_of(name, code, n, keys)
    _sites[slot] = site
    return site


cdef object _map_node_of(object name, str code, Py_ssize_t n, PyObject **keys):
    """ir.Map(name, code, *keys)."""
    cdef tuple kt = PyTuple_New(n)
    cdef Py_ssize_t i
    for i in range(n):
        _tuple_put(kt, i, <object> keys[i])
    return _new_map_node(name, code, kt)


cpdef object make_map(object name, tuple args):
    """The node for operator ``name`` on ``args`` (TypeCheck and ShapeCheck happen here)."""
    cdef Py_ssize_t n = len(args), i, j
    cdef str code = None, c
    cdef object shape = None, s
    cdef int exp_type = kMapper
    cdef Exp e
    cdef Tensor t
    cdef object device = None      # of the tensor operands: one (a run checks the rest)
    # the leaves and scalars, in argument order (the plan's binding order): counted here,
    # then each tuple allocated once at its size, or an operand's own tuple where that
    # operand holds them all (concatenating a tuple per operand was a third of a node)
    cdef Py_ssize_t nl = 0, ns = 0, il = 0, js = 0
    cdef Py_ssize_t only_l = -1, only_s = -1     # the one Exp operand holding them all
    cdef char kind[3]              # each operand's: OPD_TENSOR, OPD_EXP or OPD_SCALAR
    cdef PyObject *a
    if n > 3 or n == 0:
        raise TypeError(f"{name}: an operator takes 1 to 3 operands, got {n}")
    # pass 1: operands' dtype and shape (the scalars take the dtype found here)
    for i in range(n):
        a = PyTuple_GET_ITEM(args, i)
        if isinstance(<object> a, Tensor):
            kind[i] = OPD_TENSOR
            t = <Tensor> a
            if device is None:
                device = t.device
            elif t.device is not device:
                raise DeviceError(f"{name}: operands on different devices ({device.name} and "
                                  f"{t.device.name}); use ms.copy between devices")
            c, s = _CODE_BY_FLAG[t.type_flag], t.shape
            nl += 1
            only_l = -2
        elif isinstance(<object> a, Exp):
            kind[i] = OPD_EXP
            e = <Exp> a
            if e.exp_type == kComplex:
                nested = chained(e)       # a reduction nests as mshadow's chainer
                if nested is not e:
                    return make_map(name, args[:i] + (nested,) + args[i + 1:])
                raise TypeError(f"{name}: a {_describe(e.key)} expression (kComplex) cannot "
                                f"be nested inside another expression; assign it to a tensor "
                                f"first")
            c, s = e.code, e.shape
            if len(e.leaves):
                only_l = i if nl == 0 else -2
                nl += len(e.leaves)
            if len(e.scalars):
                only_s = i if ns == 0 else -2
                ns += len(e.scalars)
        else:
            kind[i] = OPD_SCALAR
            if not _is_scalar_arg(<object> a):
                if isinstance(<object> a, np.ndarray):
                    return make_map(name, _arrays_as_tensors(args))
                _operand(<object> a, str(name))   # raises the TypeError
            ns += 1
            only_s = -2
            continue
        if code is None:
            code = c
            shape = s
        elif c != code:
            raise DTypeError(f"{name}: operands have different dtypes "
                             f"{np.dtype(_NP_BY_CODE[code])} and {np.dtype(_NP_BY_CODE[c])}; "
                             f"use ms.tcast to convert one of them")
        elif not _same_shape(s, shape):
            k = _LEAF_KEY[t.type_flag] if kind[i] == OPD_TENSOR else e.key
            raise ShapeError(f"{name}: Shapes of operands are not the same, "
                             f"Shape1={shape}, Shape2={s} (in {_describe(k)})")
    if code is None:
        return _fold_fn(name, args)
    # the children's nodes, held from here until the node is made: converting a scalar
    # (pass 2) and any allocation (a collection) may run Python code that drops an
    # operand's node. The node is interned where every child is a leaf, a scalar or an
    # interned node
    cdef PyObject *kp[3]
    cdef bint interned = type(name) is str
    for i in range(n):
        a = PyTuple_GET_ITEM(args, i)
        if kind[i] == OPD_TENSOR:
            kp[i] = PyTuple_GET_ITEM(_LEAF_KEY, (<Tensor> a).type_flag)
        elif kind[i] == OPD_EXP:
            e = <Exp> a
            kp[i] = <PyObject *> e.key
            interned = interned and _interned_exp(e)
        else:
            kp[i] = <PyObject *> _SCALAR_KEY
        _incref(kp[i])
    cdef _Site site = None
    cdef MapExp node
    cdef tuple leaves, scalars
    try:
        # pass 2: the leaves and the scalars
        leaves = (<Exp> args[only_l]).leaves if only_l >= 0 else PyTuple_New(nl)
        scalars = (<Exp> args[only_s]).scalars if only_s >= 0 else (
            PyTuple_New(ns) if ns else ())
        for i in range(n):
            a = PyTuple_GET_ITEM(args, i)
            if kind[i] == OPD_TENSOR:
                _tuple_put(leaves, il, <object> a)
                il += 1
            elif kind[i] == OPD_EXP:
                e = <Exp> a
                exp_type |= e.exp_type
                if only_l < 0:
                    for j in range(len(e.leaves)):
                        _tuple_put(leaves, il, e.leaves[j])
                        il += 1
                if only_s < 0:
                    for j in range(len(e.scalars)):
                        _tuple_put(scalars, js, e.scalars[j])
                        js += 1
            else:
                v = <object> a
                if type(v) is not float and isinstance(v, _ScalarExp):
                    if v.dtype is not None and _CODE_BY_FLAG[_type_flag(v.dtype)] != code:
                        raise DTypeError(f"{name}: scalar of dtype {v.dtype} meets an "
                                         f"expression of dtype {np.dtype(_NP_BY_CODE[code])}; "
                                         f"use ms.tcast")
                    v = v.value
                if type(v) is float and _is_float_code(code):
                    _tuple_put(scalars, js, v)
                else:
                    _tuple_put(scalars, js, _scalar_value(v, code, str(name)))
                js += 1
        node = <MapExp> _new_exp(
            BinaryMapExp if n == 2 else UnaryMapExp if n == 1 else TernaryMapExp)
        if interned:
            site = _site_of(name, code, n, kp)
            node.key = site.node
        else:
            node.key = _map_node_of(name, code, n, kp)
    finally:
        for i in range(n):
            _decref(kp[i])
    node.site = site
    node.shape = shape
    node.code = code
    node.leaves = leaves
    node.scalars = scalars
    node.exp_type = exp_type
    node.map_op = name
    node.map_args = args
    return node


def _scalar_value_py(v, code, where):
    return _scalar_value(v, code, where)
