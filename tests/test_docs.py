"""The docs stay true: listings match the engine, tutorial code runs, the name map is complete,
and user-facing text names no tracker numbers."""
import glob
import os
import re
import sys

import numpy as np
import pytest

import mshadow as ms
from mshadow import aliases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def test_architecture_listings_are_what_plan_for_prints():
    text = _read("docs", "architecture.md")
    blocks = re.findall(r"```\n(# dst .*?)```", text, re.S)
    w = ms.new_tensor((512, 512), pad=True)
    g = ms.new_tensor((512, 512), pad=True)
    eta, lam = 0.1, 0.01
    assert blocks[0] == ms.plan_for(w, -eta * (g + lam * w)).disassemble() + "\n"
    shown = re.search(r">>> print\(ms.plan_for\(y, (.*?)\).disassemble\(\)\)\n(.*?)```", text, re.S)
    x, y = g, w
    assert shown.group(2) == ms.plan_for(y, eval(shown.group(1))).disassemble() + "\n"


def _code_blocks(text):
    """The runnable fenced blocks of a page, in order: ```python blocks (run as a script)
    and blocks that start with ``>>> `` (a doctest: each printed output is compared)."""
    blocks = re.findall(r"^```([^\n`]*)\n(.*?)^```", text, re.S | re.M)
    return [(info.strip(), body) for info, body in blocks
            if info.strip() == "python" or body.startswith(">>> ")]


# every page with code; each page's blocks run in order in one fresh namespace
DOC_PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(
    os.path.join(DOCS, "*.md")) if _code_blocks(_read(os.path.relpath(p, ROOT))))


def test_doc_pages_with_code_are_all_run():
    assert {"README.md", "docs/tutorial.md", "docs/architecture.md", "docs/dot.md",
            "docs/extensions.md", "docs/io.md", "docs/param.md", "docs/ps.md",
            "docs/reduce_nn.md", "docs/spatial.md"} <= set(DOC_PAGES)
    # a block marked as another language is not run: only these may appear
    for page in glob.glob(os.path.join(DOCS, "*.md")) + [os.path.join(ROOT, "README.md")]:
        infos = {i.split()[0] if i else "" for i in re.findall(r"^```([^\n`]*)\n", _read(page),
                                                               re.M)}
        assert infos <= {"", "python", "bash", "{toctree}", "{include}"}, (page, infos)


@pytest.mark.parametrize("page", DOC_PAGES)
def test_doc_code_blocks_run_in_order(page, tmp_path, monkeypatch, capsys):
    import doctest
    import warnings
    from mshadow.param.registry import registry
    monkeypatch.chdir(tmp_path)          # pages that save files write them here
    # a page registers its Parameters (param.md's MyParam) in a registry of its own, as a
    # fresh interpreter would: not beside the test suite's classes of the same name
    monkeypatch.setattr(registry, "_classes", {})
    env = {"__name__": "__docs__"}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    parser = doctest.DocTestParser()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # an untraced operator's notice
        for i, (info, body) in enumerate(_code_blocks(_read(page))):
            name = f"{page} block {i}"
            if body.startswith(">>> "):
                test = parser.get_doctest(body, env, name, page, 0)
                result = runner.run(test, clear_globs=False, out=lambda s: pytest.fail(s))
                assert result.attempted > 0 and result.failed == 0, name
                env.update(test.globs)           # DocTest ran on a copy of the namespace
            else:
                exec(compile(body, name, "exec"), env)
    if page == "docs/tutorial.md":
        assert "chain_f32[" in capsys.readouterr().out      # the plan the last block prints


def test_name_map_lists_every_alias():
    sys.path.insert(0, DOCS)
    try:
        import gen_names
    finally:
        sys.path.remove(DOCS)
    text = gen_names.render()
    rows = gen_names.rows()
    assert len(rows) == len(aliases._TABLE) + len(aliases.METHOD_ALIASES)
    for cpp, fn in aliases._TABLE.items():
        assert f"| `mshadow::{cpp}` | `ms.{fn.__name__}  (also ms.{cpp})` |" in text
        assert getattr(ms, cpp) is getattr(ms, fn.__name__) is fn
    for cls, cpp, py in aliases.METHOD_ALIASES:
        assert f"| `{cls.__name__}::{cpp}` | `{cls.__name__}.{py}  (also .{cpp})` |" in text
    # the embedded Cython signature is not taken for a description
    assert not re.search(r"\| Tensor\.\w+\(self", text)


def _user_facing_files():
    pats = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md", "docs/*.md", "docs/*.py",
            "benchmarks/*.md", "benchmarks/*.py", "examples/*.py", "mshadow/*.py",
            "mshadow/*/*.py", "mshadow/*.pyx", "mshadow/*.pxi"]
    return sorted(p for pat in pats for p in glob.glob(os.path.join(ROOT, pat)))


def test_user_facing_text_names_no_issue_numbers():
    files = _user_facing_files()
    assert len(files) > 20
    bad = [(os.path.relpath(p, ROOT), m.group(0)) for p in files
           for m in re.finditer(r"(?i)\bissues?[- ]?#?\d+", _read(p))]
    assert bad == []


def test_readme_keeps_the_two_setup_commands_first():
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", _read("README.md"), re.S)
    assert blocks[0].strip() == 'python -m pip install -e ".[examples]" && python examples/basic.py'
    assert blocks[1].strip() == 'python -m pip install -e ".[test]" && python -m pytest -q tests'


@pytest.mark.parametrize("page", ["tutorial", "differences-cpp", "differences-numpy", "memory",
                                  "architecture"])
def test_pages_are_in_the_sphinx_toctree(page):
    assert re.search(rf"^{page}$", _read("docs", "index.md"), re.M)


@pytest.mark.parametrize("page", ["threads", "accuracy", "ps", "io", "param", "reduce_nn"])
def test_guides_are_in_the_sphinx_toctree(page):
    assert re.search(rf"^{page}$", _read("docs", "index.md"), re.M)


def test_api_reference_documents_the_parameter_server():
    assert re.search(r"^\.\. automodule:: mshadow\.ps$", _read("docs", "api.rst"), re.M)


def test_sphinx_build_has_no_warnings(tmp_path):
    # needs the [docs] extra (sphinx, myst-parser); about 10 s
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    import subprocess
    r = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", DOCS,
                        str(tmp_path / "html")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "WARNING" not in r.stderr and "ERROR" not in r.stderr, r.stderr
    # long code lines wrap (alabaster's own css cut them off)
    css = (tmp_path / "html" / "_static" / "custom.css").read_text()
    assert "pre-wrap" in css
    assert "custom.css" in (tmp_path / "html" / "dot.html").read_text()


def test_reduce_nn_states_the_measured_summation_error():
    # the figures reduce_nn.md gives for 307,200 float32 terms, seeds 0 to 4, measured again
    import math
    text = " ".join(_read("docs", "reduce_nn.md").split())
    stated = re.search(r"largest relative error was \*\*(\S+) for the sequential loop\*\* .*?"
                       r"\*\*(\S+) for `ms.sum\(x\)`\*\* .*? and (\S+) for `np.sum\(x\)`", text)
    assert stated, "reduce_nn.md no longer states the measured figures"
    errs = {"seq": [], "ms": [], "fused": [], "np": []}
    for seed in range(5):
        x = np.random.default_rng(seed).random(307_200, np.float32)
        exact = math.fsum(x.astype(np.float64))
        t = ms.from_numpy(x)
        for key, got in (("seq", np.cumsum(x, dtype=np.float32)[-1]), ("ms", ms.sum(t)),
                         ("fused", ms.sum(t * 1)), ("np", np.sum(x))):
            errs[key].append(abs(float(got) - exact) / exact)
    # the sequential sum and ms.sum are the same on every machine; numpy's pairwise sum
    # may group differently on another CPU or numpy, so its figure is only checked roughly
    assert [f"{max(errs[k]):.1e}" for k in ("seq", "ms")] == list(stated.groups()[:2])
    assert max(errs["np"]) < 10 * float(stated.group(3))
    assert max(errs["fused"]) == max(errs["ms"])
    assert max(errs["ms"]) * 100 < max(errs["seq"])   # the point of the paragraph
