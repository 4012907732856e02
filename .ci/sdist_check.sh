#!/usr/bin/env bash
# CI: build the sdist, install it into a fresh venv (compiling from the sdist alone) and run
# the test suite it ships, from the unpacked sdist, against the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/mshadow-sdist.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "+ build the sdist"
"$py" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q build
"$work/tools/bin/python" -m build --sdist --outdir "$work/dist" .
sdist=$(ls "$work"/dist/mshadow-*.tar.gz)
echo "  $sdist"
tar -tzf "$sdist" > "$work/contents.txt"     # a file, not a pipe: grep -q would cut tar off
for f in tests/conftest.py examples/basic.py docs/conf.py LICENSE; do
    grep -q "^mshadow-[^/]*/$f\$" "$work/contents.txt" || { echo "sdist lacks $f"; exit 1; }
done
if grep -E '\.(so|o)$|/mshadow/[^/]*\.c$|_build_info\.py$|kernels_gen\.h$|dtypes_gen\.h$' "$work/contents.txt"; then
    echo "sdist carries build outputs"; exit 1
fi

echo "+ install it into a fresh venv"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$sdist[test]"

echo "+ run its tests against the installed package"
mkdir "$work/src"
tar -xzf "$sdist" -C "$work/src"
cd "$work"/src/mshadow-*/
# the pytest script, not `python -m pytest`: the unbuilt mshadow/ here must not shadow the install
"$work/venv/bin/pytest" -q -p no:cacheprovider tests
cd /
"$work/venv/bin/python" -c "import mshadow; assert 'site-packages' in mshadow.__file__, mshadow.__file__"
echo "sdist check: ok"
