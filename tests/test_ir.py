"""The typed IR (mshadow/ir.py): nodes, visitors, the dtype and saver tables, and the one
plan cache the engine owns."""
import pickle

import numpy as np
import pytest

import mshadow as ms
from mshadow import dtypes, ir
from mshadow.ops_table import STORAGE_TYPES


F32 = ir.LEAF["f32"]


def test_expressions_build_typed_nodes_equal_by_structure():
    a, b = ms.new_tensor((3, 4), 1.0), ms.new_tensor((3, 4), 2.0)
    e = -0.5 * (a + 0.1 * b)
    node = e.key
    assert isinstance(node, ir.Map) and node.op == "mul" and node.code == "f32"
    assert node.args[0] is ir.SCALAR
    inner = node.args[1]
    assert isinstance(inner, ir.Map) and inner.op == "plus"
    assert inner.args == (F32, ir.Map("mul", "f32", ir.SCALAR, F32))
    # the same structure over other tensors and values is the same node (one cached plan)
    c, d = ms.new_tensor((3, 4), 5.0), ms.new_tensor((3, 4), 6.0)
    other = (-2.0 * (c + 3.0 * d)).key
    assert other == node and hash(other) == hash(node)
    assert other != (-2.0 * (c - 3.0 * d)).key
    # a node the compiled core builds equals, and hashes as, the same node built in Python
    # (CPython 3.14 caches a tuple's hash: a node must never carry a stale one)
    rebuilt = ir.Map(*node[1:])
    assert rebuilt == node and hash(rebuilt) == hash(node) != 0
    assert {node: 1}[rebuilt] == 1


def test_node_kinds_of_every_extension_family():
    x = ms.new_tensor((2, 3, 4, 4), 1.0)
    t = ms.new_tensor((4, 5), 1.0)
    assert isinstance(ms.flip(t, 0).key, ir.View) and isinstance(ms.flip(t, 0).key, ir.Remap)
    assert isinstance(ms.pool(x, 2, 2, 2, 2).key, ir.Gather)
    assert ms.pool(x, 2, 2, 2, 2).key.kernel == "g_pool_f32"
    assert isinstance(ms.tcast(np.float64, t).key, ir.Cast)
    assert ms.tcast(np.float64, t).key.arg == F32
    assert isinstance(ms.implicit_dot(t, t.T).key, ir.ImplicitDot)
    assert isinstance(ms.dot(t, t.T).key, ir.Product) and ms.dot(t, t.T).key.kind == "dot"
    assert isinstance(ms.sum_rows(t * 2).key, ir.Reduce)
    assert ms.sum_rows(t * 2).key.src == ir.Map("mul", "f32", F32, ir.SCALAR)


def test_describe_and_repr():
    t = ms.new_tensor((4, 5), 1.0)
    e = ms.F(ms.op.exp, t.T) + ms.tcast(np.float32, ms.new_tensor((5, 4), 0, dtype=np.float64))
    assert ir.describe(e.key) == "plus(exp(Tensor<f32>.T), tcast<f32>(Tensor<f64>))"
    assert repr(e.key) == ir.describe(e.key)
    assert ir.describe(ms.pad(t, 1).key) == "pad<f32>(Tensor<f32>)"
    assert ir.describe(ms.pad(ms.F(ms.op.relu, t * 2), 1).key) == \
        "pad<f32>(relu(mul(Tensor<f32>, scalar)))"


def test_transposed_flips_leaves_and_refuses_remaps():
    node = ir.Map("plus", "f32", F32, ir.Map("mul", "f32", ir.SCALAR, ir.Leaf("f32", True)))
    flipped = ir.transposed(node)
    assert flipped == ir.Map("plus", "f32", ir.Leaf("f32", True),
                             ir.Map("mul", "f32", ir.SCALAR, F32))
    assert ir.transposed(flipped) == node
    with pytest.raises(TypeError, match="implicit_dot"):
        ir.transposed(ir.ImplicitDot("f32", F32, F32))
    with pytest.raises(TypeError, match="transpose_axes"):
        ir.transposed(ir.Map("neg", "f32", ir.View("f32", 0)))


def test_leaves_are_in_binding_order():
    a, b, c = (ms.new_tensor((4, 4), v) for v in (1.0, 2.0, 3.0))
    e = a * ms.flip(b, 0) + ms.implicit_dot(c, c.T) + ms.pad(a, 0) * 2
    kinds = [type(n).__name__ for n in ir.leaves(e.key)]
    # a gather binds its own arguments, then its sources' leaves
    assert kinds == ["Leaf", "View", "Leaf", "Leaf", "Gather", "Leaf"]
    assert len(ir.leaves(e.key)) == len(e.leaves)
    assert ir.scalar_count(e.key) == len(e.scalars) == 1
    assert ir.holds_remap(e.key) and not ir.holds_remap((a * b).key)


def test_nodes_are_frozen_and_pickle():
    node = ir.Map("plus", "f32", F32, ir.Cast("f32", ir.LEAF["f64"]))
    with pytest.raises((TypeError, AttributeError)):
        node.op = "minus"
    again = pickle.loads(pickle.dumps(node))
    assert again == node and type(again) is ir.Map and type(again.args[1]) is ir.Cast
    prod = ir.Product("batch_dot", "f64", True, False, 3, 3)
    assert pickle.loads(pickle.dumps(prod)) == prod and prod.kind == "batch_dot"


def test_one_dtype_table():
    # every storage type the kernels are generated for is a row of dtypes.DTYPES, with the
    # same C type and numpy dtype (ops_table derives its lists from the table; more in
    # tests/test_tables.py)
    table = {d.code: d for d in dtypes.DTYPES}
    assert {code for code, _, _ in STORAGE_TYPES} == set(table)
    for code, ctype, dt in STORAGE_TYPES:
        assert table[code].ctype == ctype and table[code].np == dt
        assert table[code].size == dt.itemsize
    for flag, d in enumerate(dtypes.DTYPES):
        assert d.flag == flag and dtypes.dtype_from_flag(flag) == d.np
    assert dtypes.compute_code("f16") == "f32" and dtypes.compute_code("i8") == "i8"


def test_one_saver_table():
    from mshadow.extension import reduce as red_mod
    assert tuple(ir.SAVERS) == red_mod.SAVERS == ("saveto", "plusto", "minusto", "multo", "divto")
    assert [getattr(ms.sv, s) for s in ir.SAVERS] == list(ir.SAVERS)


def test_the_engine_owns_the_only_plan_cache():
    ms.clear_plan_cache()
    x = ms.new_tensor((8, 8), 1.0)
    x += x.T * 2          # aliased: expression into a temporary, then added into x
    info = ms.plan_cache_info()
    keys = list(ms.engine._plans)
    # the assignment's plan, the expression into the temporary, the temporary into x
    assert info.currsize == len(keys) == 3
    assert all(k[3] is ms.cpu and isinstance(k[0], ir.Node) for k in keys)
    assert {k[2] for k in keys} == {"plusto", "saveto"}
    np.testing.assert_array_equal(x.numpy(), 3.0)
    ms.clear_plan_cache()
    assert ms.plan_cache_info().currsize == 0


def test_the_core_does_not_import_the_layers_above_it():
    # every source of the compiled core imports only the tables and modules below it; the
    # layers above install their entry points (_core.install_layer), so no import is circular
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "mshadow"   # the sources
    if not (root / "_core.pyx").exists():
        pytest.skip("the Cython sources are not beside the tests")
    # (cuda: its package module, the CUDA driver's selector, which imports only the driver
    # extension and errors; the core allocates and copies gpu memory through it)
    below = {"dtypes", "ir", "ops_table", "readers", "shape", "device", "errors",
             "codegen_cpu", "cuda"}
    core = sorted(p.name for p in root.glob("_*.pxi")) + ["_core.pyx"]
    assert {"_tensor.pxi", "_engine.pxi", "_stages.pxi", "_gather.pxi"} <= set(core)
    for name in core:
        text = (root / name).read_text()
        for m in re.finditer(r"^\s*(?:from\s+\.(\w*)\s+c?import\s+([\w, ]+)|import\s+\.)",
                             text, re.M):
            module = m.group(1) or m.group(2)
            assert module in below, (name, m.group(0).strip())


def test_no_import_circle_between_the_modules():
    # every relative import of the package (module level or inside a function) is an edge;
    # the layers must form no cycle (the core's upward calls are installed entry points)
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "mshadow"
    if not (root / "_core.pyx").exists():
        pytest.skip("the sources are not beside the tests")
    edges = {}
    for path in root.rglob("*"):
        if path.suffix not in (".py", ".pyx", ".pxi"):
            continue
        rel = path.relative_to(root.parent).with_suffix("")
        if path.suffix in (".pyx", ".pxi"):
            mod, pkg = "mshadow._core", "mshadow"
        elif rel.name == "__init__":
            mod = pkg = ".".join(rel.parts[:-1])
        else:
            mod, pkg = ".".join(rel.parts), ".".join(rel.parts[:-1])
        for m in re.finditer(r"^\s*from (\.+)([\w.]*) c?import ([\w, ()\\\n]+)", path.read_text(),
                             re.M):
            base = pkg
            for _ in range(len(m.group(1)) - 1):
                base = base.rsplit(".", 1)[0]
            names = [m.group(2)] if m.group(2) else re.findall(r"\w+", m.group(3))
            edges.setdefault(mod, set()).update(f"{base}.{n}" for n in names if n != "as")
    state = {}

    def visit(v, path):
        state[v] = "open"
        for w in edges.get(v, ()):
            if state.get(w) == "open":
                raise AssertionError(f"import circle: {' -> '.join(path + [v, w])}")
            if w not in state:
                visit(w, path + [v])
        state[v] = "done"
    for v in sorted(edges):
        if v not in state:
            visit(v, [])


def test_the_plan_cache_evicts_the_least_recently_used():
    # a hit stamps the plan (one dict lookup); an insertion past the bound drops the least
    # recently used eighth: a structure in use is never compiled again
    ms.clear_plan_cache()
    ms.set_plan_cache_size(8)
    try:
        x, y = ms.new_tensor((4,), 1.0), ms.new_tensor((4,))
        hot = x * 3.0 + 1.0
        y[:] = hot
        key = (hot.key, "f32", "saveto", ms.cpu)
        plan = ms.engine._plans[key]
        for n in range(1, 40):
            e = x
            for _ in range(n):           # a new structure each time
                e = ms.F(ms.op.tanh, e)
            y[:] = e
            y[:] = hot                   # the hot one is used between every two
            assert len(ms.engine._plans) <= 8
        assert ms.engine._plans[key] is plan
        np.testing.assert_allclose(y.numpy(), 4.0)
    finally:
        ms.set_plan_cache_size(2048)
