"""Packaging promises: metadata, what the sdist and wheel carry, and a setup.py that does no
work when it is merely imported or asked for metadata."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tomllib = pytest.importorskip("tomllib")          # Python 3.11+


@pytest.fixture(scope="module")
def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_metadata(pyproject):
    p = pyproject["project"]
    assert p["license"] == "Apache-2.0" and p["license-files"] == ["LICENSE"]
    assert p["requires-python"] == ">=3.10"
    assert "numpy>=1.25" in p["dependencies"]
    for v in ("3.10", "3.11", "3.12", "3.13", "3.14"):
        assert f"Programming Language :: Python :: {v}" in p["classifiers"]
    assert not any(c.startswith("License ::") for c in p["classifiers"])   # PEP 639: expression only
    assert set(p["optional-dependencies"]) >= {"test", "docs"}
    build = pyproject["build-system"]["requires"]
    assert any(r.startswith("numpy>=2.0") for r in build) and "setuptools>=77" in build


def test_license_is_the_full_apache_text():
    text = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10000


def test_wheel_carries_pxd_and_headers_not_sources(pyproject):
    st = pyproject["tool"]["setuptools"]
    assert {"*.pxd", "include/mshadow/*.h"} <= set(st["package-data"]["mshadow"])
    assert {"*.c", "*.pyx", "*.pxi"} <= set(st["exclude-package-data"]["mshadow"])


def test_the_emulated_devices_shim_ships(pyproject):
    # mshadow.cuda.emulate compiles every kernel under it, from a wheel or an sdist too
    from mshadow.cuda import emulate
    shim = os.path.relpath(emulate.SHIM, os.path.dirname(emulate.__file__))
    assert shim == os.path.join("include", "host_shim.h") and os.path.exists(emulate.SHIM)
    assert "include/*.h" in pyproject["tool"]["setuptools"]["package-data"]["mshadow.cuda"]
    manifest = open(os.path.join(ROOT, "MANIFEST.in")).read().splitlines()
    assert "recursive-include mshadow/cuda/include *.h" in manifest


def test_cibuildwheel_builds_310_to_314(pyproject):
    build = pyproject["tool"]["cibuildwheel"]["build"].split()
    assert build == ["cp310-*", "cp311-*", "cp312-*", "cp313-*", "cp314-*"]


def test_manifest_ships_tests_examples_docs():
    manifest = open(os.path.join(ROOT, "MANIFEST.in")).read().splitlines()
    for d in ("tests", "examples", "docs"):
        assert f"graft {d}" in manifest
    assert os.path.exists(os.path.join(ROOT, "tests", "conftest.py"))


def test_setup_py_metadata_query_builds_nothing(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("pyproject's license expression needs setuptools >= 77")
    # a source tree with nothing generated yet: asking for metadata must not generate it
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(os.path.join(ROOT, name), tmp_path)
    shutil.copytree(os.path.join(ROOT, "mshadow"), tmp_path / "mshadow", ignore=shutil.ignore_patterns(
        "*.c", "*.so", "kernels_gen.h", "dtypes_gen.h", "_build_info.py", "__pycache__"))
    r = subprocess.run([sys.executable, "setup.py", "--name"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "mshadow"
    assert "mshadow build:" not in r.stderr
    assert glob.glob(str(tmp_path / "mshadow" / "*.c")) == []
    for header in ("kernels_gen.h", "dtypes_gen.h"):
        assert not (tmp_path / "mshadow" / "include" / "mshadow" / header).exists()


def test_package_is_found_on_sys_path_not_only_through_an_import_hook(tmp_path):
    # Cython (`cimport mshadow`) and mypy look for mshadow/ in sys.path's directories; an
    # import-hook finder (setuptools' default editable install for a flat layout) imports
    # fine but hides the package from them. A fresh interpreter outside the checkout, with the
    # environment as it is, must find the imported package by a plain path search.
    import mshadow
    code = ("import importlib.machinery as m, mshadow, os; "
            "s = m.PathFinder.find_spec('mshadow'); "
            "print(s and s.origin); print(mshadow.__file__)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0 and not os.environ.get("PYTHONPATH"):
        pytest.skip("mshadow is not installed in this environment (only found by pytest)")
    assert r.returncode == 0, r.stderr
    found, imported = r.stdout.split("\n")[:2]
    assert found != "None", f"mshadow imports from {imported} but no sys.path directory has it"
    assert os.path.samefile(found, imported) and os.path.samefile(imported, mshadow.__file__)


def test_every_subpackage_is_packaged(pyproject):
    # pyproject lists the packages by name: one left out installs a wheel/sdist that cannot
    # import (mshadow.lower was missing while the editable install, reading the checkout, worked)
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {os.path.relpath(d, ROOT).replace(os.sep, ".")
             for d, _, files in os.walk(os.path.join(ROOT, "mshadow")) if "__init__.py" in files}
    assert found == listed, (sorted(found - listed), sorted(listed - found))
