#!/usr/bin/env bash
# CI: the suite under AddressSanitizer. A copy of the tracked tree is built in place with
# -fsanitize=address (every kernel level: plain, SSE2, AVX2, AVX-512) and its tests run
# against that build with libasan preloaded into the interpreter, so an out-of-bounds read
# or write of any kernel, a use after free_space or a double free stops the run with
# ASan's report. (A store one element before a register's start, im2col's at bd7a3d0,
# gave a wrong value only when the element before was a live register; ASan names it.)
#
# Left out: tests/cuda and the CUDA tests (NVRTC and the emulated device's modules are
# compiled code of their own), the typing, Cython-example and examples tests (they build
# or run other programs: minutes under the sanitizer, nothing of the kernels).
#
# Needs gcc's libasan and the build tools the README's test install brings (Cython,
# setuptools, numpy, scipy); where gcc has no libasan it says so and skips (exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
skip() { echo "asan check: SKIPPED: $*"; exit 0; }

command -v gcc > /dev/null || skip "no gcc"
libasan=$(gcc -print-file-name=libasan.so)
[ -f "$libasan" ] || skip "gcc has no libasan.so"
"$py" -c "import Cython, setuptools, numpy, scipy, pytest" 2> /dev/null \
    || skip "the build tools are not installed (run the README's test install first)"

work=$(mktemp -d "${TMPDIR:-/tmp}/mshadow-asan.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/log"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/src"

echo "+ build with -fsanitize=address"
(cd "$work/src" && CFLAGS="-fsanitize=address -fno-omit-frame-pointer" \
    LDFLAGS="-fsanitize=address" "$py" setup.py -q build_ext --inplace > "$work/build.log" 2>&1) \
    || { tail -30 "$work/build.log"; echo "asan build failed"; exit 1; }

export LD_PRELOAD="$libasan"
# leaks: CPython's own allocations at exit would be reported; errors stop the process
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$work/log/asan"
export PYTHONPATH="$work/src"
cd "$work/src"
"$py" -c "import mshadow, sys; sys.exit(not mshadow.__file__.startswith('$work/src'))" \
    || { echo "the tests would not import the sanitized build"; exit 1; }

echo "+ the suite against it"
ignore=(--ignore=tests/cuda --ignore=tests/test_typing.py --ignore=tests/test_cython_example.py)
for f in tests/test_cuda*.py tests/test_examples*.py; do
    [ -e "$f" ] && ignore+=("--ignore=$f")
done
status=0
"$py" -m pytest -q -p no:cacheprovider tests "${ignore[@]}" || status=$?
if ls "$work"/log/asan.* > /dev/null 2>&1; then
    echo "AddressSanitizer reported:"
    cat "$work"/log/asan.*
    exit 1
fi
exit $status
