"""The docs stay true: listings match the engine, tutorial code runs, the name map is complete,
and user-facing text names no tracker numbers."""
import glob
import os
import re
import sys

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


def test_tutorial_code_runs_in_order(capsys):
    code = re.findall(r"```python\n(.*?)```", _read("docs", "tutorial.md"), re.S)
    assert len(code) >= 8
    env = {}
    for i, block in enumerate(code):
        exec(compile(block, f"docs/tutorial.md block {i}", "exec"), env)
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
    assert blocks[0].strip() == "python -m pip install -e . && python examples/basic.py"
    assert blocks[1].strip() == 'python -m pip install -e ".[test]" && python -m pytest -q tests'


@pytest.mark.parametrize("page", ["tutorial", "differences-cpp", "differences-numpy", "memory",
                                  "architecture"])
def test_pages_are_in_the_sphinx_toctree(page):
    assert re.search(rf"^{page}$", _read("docs", "index.md"), re.M)
