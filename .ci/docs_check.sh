#!/usr/bin/env bash
# CI: the docs build with no warning and their code blocks run (tests/test_docs.py), with the
# docs extra (sphinx, myst-parser) added to the install the README's command made.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[docs]"
python -c "import sphinx, myst_parser; print('+ sphinx', sphinx.__version__, '/ myst-parser', myst_parser.__version__)"
python -m pytest -q -p no:cacheprovider tests/test_docs.py
