# Matrix-product nodes: dot's forms and the node of a product (included by _core.pyx).
#
# `c[:] = dot(a, b)` on small matrices is a per-statement path: building the node in Python
# took 4.6 us where numpy's whole `matmul(a, b, out=c)` takes 1.0. So dot's shape rules and
# the node's construction are compiled here, their only copy, with the node's class
# (ProductExp: its fields are read at C speed by _blas.assign_product). mshadow/dot.py
# subclasses it (DotExp, BatchDotExp), installs those (install_layer) and keeps the
# products' evaluation. This file imports only the layers below it.

from .ir import Product as _IRProduct, Leaf as _IRLeaf

cdef class ProductExp(ScaledExp):
    """What DotExp and BatchDotExp (mshadow/dot.py) share: operands (tensors, or a 2-D
    dot's expressions), BLAS's transpose flags, and a scale that folds."""

    _extra = ("lhs", "rhs", "ltrans", "rtrans", "scale")
    _what = "product"

    def __repr__(self):
        lhs, rhs = product_name(self.lhs, self.ltrans), product_name(self.rhs, self.rtrans)
        scale = "" if self.scale == 1 else f" * {self.scale!r}"
        return (f"{type(self).__name__}({lhs}, {rhs}{scale}, shape={self.shape}, "
                f"dtype={self.code})")


cdef object _dot_class = None         # dot.DotExp
cdef object _batch_dot_class = None   # dot.BatchDotExp

# The Product node of two tensors, one per (kind, dtype, flags, ranks): a few dozen in a
# program, so built once each (a node is a tuple: equal nodes are interchangeable)
cdef Py_ssize_t _NFLAGS = len(_CODE_BY_FLAG)
cdef list _tensor_products = [None] * (2 * _NFLAGS * 2 * 2 * 3 * 3)   # kind x flag x ...


cpdef str product_name(object x, bint trans):
    """An operand as messages name it: Tensor(3, 4).T"""
    return (f"{'Tensor' if isinstance(x, Tensor) else type(x).__name__}{tuple(x.shape)}"
            + (".T" if trans else ""))


cdef tuple _product_operand(object x, str where):
    """(tensor, transposed) for a Tensor, ``t.T`` or a numpy array, or (expression, False)
    for any other expression that is not kComplex; anything else is refused.

    mshadow's DotExp takes ``Tensor`` or ``Tensor.T()`` only. Here a 2-D product also takes
    a 2-D expression operand (``dot(w, unpack_patch2col(pad(x, 1), 3, 3, 1))``, cxxnet's
    convolution): the engine evaluates it a panel of columns at a time (dot._eval_expression).
    """
    if isinstance(x, Tensor):
        return x, False
    x = _operand(x, where)
    if isinstance(x, Tensor):
        return x, False
    cdef Exp e = <Exp> x
    if isinstance(x, TransposeExp) and type(e.key) is _IRLeaf and len(e.leaves) == 1:
        return e.leaves[0], True
    if e.exp_type != kComplex:
        return x, False
    raise TypeError(f"{where}: operands must be tensors, transposed tensors (t.T) or "
                    f"expressions, got the expression {_describe(e.key)}; assign it to a "
                    f"tensor first")


cdef inline tuple _shape_of(object x):
    """An operand's shape, as a tuple (a Shape is one; its item slot is a Python-level call
    for a tuple subclass, the tuple's is not)."""
    return <tuple> ((<Tensor> x).shape if isinstance(x, Tensor) else (<Exp> x).shape)


cdef inline tuple _leaves_of(object x):
    return (x,) if isinstance(x, Tensor) else (<Exp> x).leaves


cdef inline str _code_of(object x):
    return _CODE_BY_FLAG[(<Tensor> x).type_flag] if isinstance(x, Tensor) else (<Exp> x).code


cpdef str product_code(object a, object b, str where):
    """The dtype code of a product of ``a`` and ``b`` (tensors or expressions), after
    TypeCheck (one dtype) and the device check (one device, the CPU's or the GPU's)."""
    ca, cb = _code_of(a), _code_of(b)
    if ca != cb:
        raise DTypeError(f"{where}: operands have different dtypes "
                         f"{np.dtype(_NP_BY_CODE[ca]).name} and "
                         f"{np.dtype(_NP_BY_CODE[cb]).name}; use ms.tcast to convert one of "
                         f"them")
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and (<Tensor> a).device is cpu
            and (<Tensor> b).device is cpu):
        check_devices(where, None, leaf_devices(_leaves_of(a) + _leaves_of(b)), gpu_ok=True)
    return ca


cdef object _product_key(str kind, str code, bint ta, bint tb, object a, object b):
    """ir.Product of the operands (an expression operand's node is part of it)."""
    cdef Py_ssize_t na = len(_shape_of(a)), nb = len(_shape_of(b)), i
    cdef bint tensors = isinstance(a, Tensor) and isinstance(b, Tensor)
    if tensors and na <= 3 and nb <= 3:
        i = (((((kind == "batch_dot") * _NFLAGS + (<Tensor> a).type_flag) * 2 + ta) * 2
              + tb) * 3 + na - 1) * 3 + nb - 1
        key = _tensor_products[i]
        if key is None:
            key = _tensor_products[i] = _IRProduct(kind, code, ta, tb, na, nb, None, None)
        return key
    return _IRProduct(kind, code, ta, tb, na, nb,
                      None if isinstance(a, Tensor) else (<Exp> a).key,
                      None if isinstance(b, Tensor) else (<Exp> b).key)


cpdef object product_node(str kind, object a, bint ta, object b, bint tb, tuple shape,
                          str code):
    """The DotExp (``kind`` "dot") or BatchDotExp ("batch_dot") of checked operands: its
    result ``shape`` and dtype ``code``, scale 1."""
    cls = _dot_class if kind == "dot" else _batch_dot_class
    if cls is None:
        raise ImportError("mshadow.dot is not imported (import mshadow)")
    cdef ProductExp node = <ProductExp> _new_exp(cls)
    node.key = _product_key(kind, code, ta, tb, a, b)
    # the dims come from validated tensor shapes: no Shape checks per dim (per-call path)
    node.shape = _tuple_of(Shape, shape)
    node.code = code
    node.leaves = _leaves_of(a) + _leaves_of(b)
    cdef object scale = 1.0 if _is_float_code(code) else 1   # (an int for integer dtypes)
    node.scalars = (scale,)
    node.exp_type = kComplex
    node.scale = scale
    node.lhs = a
    node.rhs = b
    node.ltrans = ta
    node.rtrans = tb
    return node


def dot(lhs, rhs):
    """``dot(a, b)``: the matrix product, evaluated by BLAS when assigned.

    Forms: 2-D[.T] x 2-D[.T] (gemm), 1-D x 2-D[.T] and 2-D[.T] x 1-D (gemv), 1-D x 1-D
    (inner product, shape (1,)), ``u.T`` x 1-D (outer product). Scale with ``* s``/``-``.
    """
    a, ta = _product_operand(lhs, "dot")
    b, tb = _product_operand(rhs, "dot")
    cdef str code = product_code(a, b, "dot")
    cdef tuple sa = _shape_of(a), sb = _shape_of(b)
    cdef Py_ssize_t na = len(sa), nb = len(sb)
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) and not na == nb == 2:
        x = b if isinstance(a, Tensor) else a
        raise TypeError(f"dot: an expression operand ({_describe((<Exp> x).key)}) takes part "
                        f"in a 2-D product only, got {product_name(a, ta)} x "
                        f"{product_name(b, tb)}; assign it to a tensor first")
    if na > 2 or nb > 2:
        raise ShapeError(f"dot: operands must be 1-D or 2-D, got {product_name(a, ta)} and "
                         f"{product_name(b, tb)}; use batch_dot for 3-D batches")
    if na == 2 and nb == 2:
        m, k = (sa[1], sa[0]) if ta else (sa[0], sa[1])
        k2, n = (sb[1], sb[0]) if tb else (sb[0], sb[1])
        if k != k2:
            raise ShapeError(f"dot-gemm: matrix shape mismatch: {product_name(a, ta)} x "
                             f"{product_name(b, tb)} (inner sizes {k} and {k2})")
        return product_node("dot", a, ta, b, tb, (m, n), code)
    if na == 1 and nb == 2 and not ta:
        k = sa[0]
        k2, n = (sb[1], sb[0]) if tb else (sb[0], sb[1])
        if k != k2:
            raise ShapeError(f"dot-gemv: matrix shape mismatch: {product_name(a, ta)} x "
                             f"{product_name(b, tb)}")
        return product_node("dot", a, False, b, tb, (n,), code)
    if na == 2 and nb == 1 and not tb:
        m, k = (sa[1], sa[0]) if ta else (sa[0], sa[1])
        if k != sb[0]:
            raise ShapeError(f"dot-gemv: matrix shape mismatch: {product_name(a, ta)} x "
                             f"{product_name(b, tb)}")
        # the vector is a (1, k) row in memory: read it transposed, as a column
        return product_node("dot", a, ta, b, True, (m,), code)
    if na == 1 and nb == 1 and not ta and not tb:
        if sa[0] != sb[0]:
            raise ShapeError(f"VectorDot: Shape mismatch: {product_name(a, ta)} x "
                             f"{product_name(b, tb)}")
        return product_node("dot", a, False, b, True, (1,), code)
    if na == 1 and nb == 1 and ta and not tb:
        # outer product: (m, 1) x (1, n), a gemm with k = 1
        return product_node("dot", a, True, b, False, (sa[0], sb[0]), code)
    raise TypeError(f"dot: unsupported operand form {product_name(a, ta)} x "
                    f"{product_name(b, tb)} (supported: 2-D[.T] x 2-D[.T], 1-D x 2-D[.T], "
                    f"2-D[.T] x 1-D, 1-D x 1-D, 1-D.T x 1-D)")


# ---- the compiled per-statement entries of kComplex kinds --------------------------------
# kind (a kComplex node's tag: "dot", ...) -> fn(dst, exp, saver, nthreads): True when it
# stored `dst <saver> exp`; False, having done nothing, for whatever the engine's full path
# (engine.assign: checks, errors, other devices) must take. The layers above install them
# (dot.py: _blas.assign_product, once _blas is loaded); _assign reads them.
cdef dict _complex_fast = {}


def install_complex_fast(str kind, fn):
    """Install the compiled entry of ``dst <saver> exp`` for the kComplex kind ``kind``."""
    _complex_fast[kind] = fn
