"""Sphinx configuration: ``python -m sphinx -b html docs docs/_build/html``.

The API pages import mshadow, so build the extension first (``python setup.py build_ext
--inplace`` in a checkout, or install the package). The C++ name map is generated from
mshadow/aliases.py on every build (docs/_generated/, not committed).
"""
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
# A checkout with an in-place build documents that build; otherwise the installed package.
if any(p.endswith((".so", ".pyd")) for p in glob.glob(os.path.join(ROOT, "mshadow", "_core.*"))):
    sys.path.insert(0, ROOT)

import mshadow  # noqa: E402

import gen_names  # noqa: E402

gen_names.write(os.path.join(HERE, "_generated", "cpp_names.md"))

project = "mshadow for Python"
author = "mshadow for Python contributors"
copyright = "mshadow for Python contributors; C++ mshadow: the dmlc authors (Apache-2.0)"
release = mshadow.__version__
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.autosummary",
              "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# The existing pages link each other as plain file names (architecture.md); keep them quiet.
suppress_warnings = ["myst.xref_missing", "myst.header"]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Cython's embedsignature puts the signature on the docstring's first line; autodoc reads it.
autodoc_docstring_signature = True
autosummary_generate = False

html_theme = "alabaster"
# a wider page; _static/custom.css (which alabaster links itself) wraps long code lines
html_theme_options = {"page_width": "1100px"}
html_static_path = ["_static"]
html_title = f"mshadow for Python {release}"
