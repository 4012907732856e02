#!/usr/bin/env bash
# Run the test suite, built in place against numpy 2.x, under the oldest supported numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)/oldest
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q "numpy==1.25.*" "scipy==1.11.*" "pytest>=7" "hypothesis>=6" threadpoolctl
"$venv/bin/python" -c "import numpy; print('+ oldest numpy:', numpy.__version__)"
ls mshadow/_core*.so >/dev/null   # the in-place build of the command above
PYTHONPATH="$PWD" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
