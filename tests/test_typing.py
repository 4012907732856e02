"""The stubs are true and sufficient: ``mypy.stubtest`` finds the typed API (mshadow/*.pyi)
agrees with the running package, every public name is typed, and mypy accepts the README's
taste, the tutorial and the examples under --strict for calls into mshadow (tests/typing/).

Both checks run mypy in a subprocess against the mshadow this suite imports, as a user's mypy
sees it (installed: editable, wheel or sdist). mypy's cache lives in pytest's cache directory
when there is one, so a repeated run takes seconds. Skipped where mypy is not installed
(it is in the ``test`` extra)."""
import ast
import os
import re
import subprocess
import sys
import time

import pytest

import mshadow as ms
from mshadow.ops_table import OPS
from mshadow.ir import SAVER_TABLE
from mshadow.readers import REDUCER_TABLE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TYPING = os.path.join(ROOT, "tests", "typing")
PKG = os.path.dirname(os.path.abspath(ms.__file__))


def _stub_names(path, cls=None):
    """Names a .pyi binds at module level (or in class ``cls``)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    body = tree.body
    if cls is not None:
        body = next(n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls)
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname for a in node.names if a.asname)
    return names


def test_every_public_name_is_in_the_stub():
    stub = _stub_names(os.path.join(PKG, "__init__.pyi"))
    public = set(ms.__all__) | set(ms._PUBLIC_NOT_STARRED)
    assert not public - stub, f"public names without a type: {sorted(public - stub)}"
    assert not {n for n in stub - public if not n.startswith("_")} - {"__version__", "__all__"}


def test_op_stub_lists_the_tables():
    stub = _stub_names(os.path.join(PKG, "op.pyi"))
    assert {r.name for r in OPS} <= stub
    assert _stub_names(os.path.join(PKG, "op.pyi"), "_Savers") == {s.name for s in SAVER_TABLE}
    assert _stub_names(os.path.join(PKG, "op.pyi"), "_Reducers") == {r.name for r in REDUCER_TABLE}


@pytest.fixture(scope="module")
def mypy_run(request, tmp_path_factory):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e \".[test]\")")
    cache = getattr(request.config, "cache", None)
    cache_dir = (cache.mkdir("mypy") if cache is not None
                 else tmp_path_factory.mktemp("mypy_cache"))
    env = dict(os.environ)
    # the child imports the mshadow this process imported (see tests/test_config.py)
    paths = [os.path.dirname(PKG), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.pop("MYPYPATH", None)
    work = tmp_path_factory.mktemp("mypy_work")

    def run(module, *args, cwd=None):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd or work, env=env,
                           capture_output=True, text=True, timeout=600)
        return r, time.perf_counter() - t0
    run.cache_dir = str(cache_dir)
    run.work = work
    return run


def test_stubtest_agrees_with_the_runtime(mypy_run):
    r, _ = mypy_run("mypy.stubtest", "mshadow", "--ignore-missing-stub",
                    "--mypy-config-file", os.path.join(TYPING, "stubtest.ini"),
                    "--allowlist", os.path.join(TYPING, "stubtest-allowlist.txt"))
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]


def _snippets():
    """(module name, code) of the README's taste and the tutorial's blocks, in order."""
    def blocks(*path):
        with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
            return re.findall(r"```python\n(.*?)```", f.read(), re.S)
    return [("readme_taste", blocks("README.md")[0]),
            ("tutorial", "\n".join(blocks("docs", "tutorial.md")))]


def test_readme_tutorial_and_examples_type_check(mypy_run):
    # One mypy run (one start, one cache load) over the README taste, the tutorial, every
    # example and a file of mistakes the stubs must catch. Module names come from file names:
    # examples/basic.py is copied as examples_basic.py beside guide/basic.py.
    import shutil
    work = mypy_run.work
    files = []
    for name, code in _snippets():
        (work / f"{name}.py").write_text(code)
        files.append(str(work / f"{name}.py"))
    shutil.copy(os.path.join(ROOT, "examples", "basic.py"), work / "examples_basic.py")
    files.append(str(work / "examples_basic.py"))
    for sub in ("guide", "neuralnet"):
        d = os.path.join(ROOT, "examples", sub)
        files += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".py")]
    files.append(os.path.join(ROOT, "examples", "cython", "demo.py"))
    # the stubs are not Any in disguise: == typed as bool, a misspelled name and a wrong
    # argument are errors; the README's own spellings are not
    (work / "wrong.py").write_text(
        "import mshadow as ms\n"
        "a = ms.new_tensor((2, 3))\n"
        "b: bool = a == a\n"
        "import mshadow; mshadow.broadcats(a, (2, 3), 1)\n"   # (ms.<typo> would trip test_namespace)
        "ms.dot(a, 'x')\n"
        "y = ms.F(ms.op.relu, a + ms.broadcast(a, (2, 3), 1))\n"
        "reveal_type(a == a)\n")
    files.append(str(work / "wrong.py"))
    # the user code's own unannotated functions may be called untyped; mshadow's may not
    own = [arg for f in files for arg in ("--untyped-calls-exclude",
                                          os.path.basename(f)[:-3])]
    r, seconds = mypy_run("mypy", "--config-file", os.path.join(TYPING, "mypy.ini"),
                          "--cache-dir", mypy_run.cache_dir, *own, *files)
    out = r.stdout
    lines = [ln for ln in out.splitlines() if ": error:" in ln or ": note:" in ln]
    elsewhere = [ln for ln in lines if not os.path.basename(ln.split(":")[0]) == "wrong.py"]
    assert not elsewhere, out[-6000:] + r.stderr[-2000:]
    assert r.returncode == 1, out + r.stderr
    assert 'wrong.py:3: error: Incompatible types in assignment (expression has type "Exp"' in out
    assert 'wrong.py:4: error: Module has no attribute "broadcats"' in out
    assert 'wrong.py:5: error: Argument 2 to "dot"' in out
    assert "wrong.py:6:" not in out
    assert 'wrong.py:7: note: Revealed type is "mshadow._core.Exp"' in out
    assert len([ln for ln in lines if ": error:" in ln]) == 3, out
