"""The public namespace: __all__, dir(ms), star-import hygiene, documented names, typing."""
import builtins
import glob
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import CHILD_CWD, child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERNAL = ["ir", "lower", "fallback", "codegen_cpu", "engine", "expr", "ops_table", "dtypes",
            "device", "shape", "errors", "aliases", "blob", "config", "extension", "_core",
            "_blas"]


def test_star_import_binds_all_and_no_builtin():
    ns = {}
    exec("from mshadow import *", ns)
    names = set(ns) - {"__builtins__"}
    assert names == set(ms.__all__)
    assert not names & set(dir(builtins)), names & set(dir(builtins))
    assert "range" not in ns and "type" not in ns and "sum" not in ns and "__version__" not in ns


def test_all_is_unique_and_resolves():
    assert len(ms.__all__) == len(set(ms.__all__))
    for name in ms.__all__:
        assert getattr(ms, name) is not None, name


def test_mshadow_range_and_type_stay_reachable():
    assert ms.range is ms.extension.range
    assert ms.type.kMapper == 1 and hasattr(ms.type, "kChainer")
    r = ms.new_tensor((5,))
    r[:] = ms.range(0, 5)
    assert r.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_dir_lists_the_public_api_only():
    public = {n for n in ms.__all__ if not n.startswith("__")} | {"range", "type", "sum"}
    listed = {n for n in dir(ms) if not n.startswith("__")}
    assert listed == public
    assert not set(INTERNAL) & set(dir(ms))
    # right after import, no implementation module is bound (one imported later, such as
    # mshadow.testing, is bound by the import system but stays out of dir(ms))
    code = ("import inspect, mshadow as ms\n"
            "print(sorted(n for n, v in vars(ms).items() if inspect.ismodule(v)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=CHILD_CWD, env=child_env(),
                         capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "['nn', 'op', 'param', 'ps']"


def test_internal_modules_still_resolve():
    # tests and downstream code use ms.engine._plans, `from mshadow import engine`
    assert ms.engine is sys.modules["mshadow.engine"]
    from mshadow import config, ir
    from mshadow.lower import cpu as lower
    assert ms.cpu is ms.device.cpu and lower.compile_plan and ir.Map and config.__name__ == "mshadow.config"
    import mshadow.fallback
    assert mshadow.fallback.__name__ == "mshadow.fallback"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        ms.no_such_name
    with pytest.raises(AttributeError):
        ms.include   # a directory of C headers, not a module


def test_documented_names_resolve():
    texts = [os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "*.md")) \
        + glob.glob(os.path.join(ROOT, "examples", "**", "*.py"), recursive=True) \
        + glob.glob(os.path.join(ROOT, "examples", "**", "*.pyx"), recursive=True) \
        + [p for p in glob.glob(os.path.join(ROOT, "tests", "*.py"))
           if not p.endswith("test_namespace.py")]
    names = set()
    for path in texts:
        names |= set(re.findall(r"\bms\.([A-Za-z_][A-Za-z_0-9]*)", open(path).read()))
    assert len(names) > 100
    missing = [n for n in sorted(names) if not hasattr(ms, n)]
    assert not missing, missing


def test_fresh_interpreter_star_import():
    code = ("from mshadow import *\n"
            "assert range(3) == builtins.range(3) and type(1) is int and sum([1, 2]) == 3\n"
            "t = new_tensor((2,), init=1.0)\nprint(t.tolist())\n")
    out = subprocess.run([sys.executable, "-c", "import builtins\n" + code], cwd=CHILD_CWD,
                         env=child_env(),
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[1.0, 1.0]"


def test_get_include_has_the_headers():
    inc = ms.get_include()
    assert os.path.isfile(os.path.join(inc, "mshadow", "alloc.h"))


def test_signatures_of_compiled_classes():
    sig = inspect.signature(ms.Tensor)
    assert list(sig.parameters) == ["shape", "dtype", "device", "stream"]
    # the defaults the signature shows mean what the real defaults mean
    d = sig.parameters
    t = ms.Tensor((2, 3), dtype=d["dtype"].default, device=d["device"].default)
    assert t.dtype == ms.Tensor((2, 3)).dtype == np.float32 and t.device is ms.cpu
    sig = inspect.signature(ms.TensorContainer)
    assert list(sig.parameters) == ["shape", "init", "pad", "dtype", "device", "stream"]
    assert sig.parameters["pad"].default is True
    assert ms.Tensor.__doc__.lstrip().startswith("A handle with no memory")
    assert list(inspect.signature(ms.new_tensor).parameters)[:3] == ["shape", "init", "pad"]


def test_typing_files_are_shipped_beside_the_package():
    pkg = os.path.dirname(ms.__file__)
    for name in ("py.typed", "_core.pyi", "__init__.pxd", "_core.pxd"):
        assert os.path.isfile(os.path.join(pkg, name)), name
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert '"py.typed"' in text and '"*.pyi"' in text and '"*.pxd"' in text


def test_stub_names_exist_at_runtime():
    # every name the stub declares is real (the stub's __getattr__ covers the rest)
    stub = open(os.path.join(os.path.dirname(ms.__file__), "_core.pyi")).read()
    declared = re.findall(r"^(?:class|def) ([A-Za-z_][A-Za-z_0-9]*)", stub, re.M)
    declared += re.findall(r"^([A-Z_]+): ", stub, re.M)
    core = sys.modules["mshadow._core"]
    missing = [n for n in declared if n != "__getattr__" and not hasattr(core, n)]
    assert not missing, missing
    for cls in ("Tensor", "TensorContainer", "Exp"):
        body = stub.split(f"class {cls}")[1].split("\nclass ")[0]
        for meth in re.findall(r"    def ([A-Za-z_][A-Za-z_0-9]*)\(", body):
            if meth not in ("__buffer__", "__release_buffer__", "__lt__", "__le__", "__gt__",
                            "__ge__"):
                assert hasattr(getattr(core, cls), meth), (cls, meth)
