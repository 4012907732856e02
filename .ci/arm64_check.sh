#!/usr/bin/env bash
# CI: the arm64 build and its NEON level, on an x86-64 Debian machine.
#
# 1. Cross-compiles the extension for aarch64 with Debian's gcc-aarch64-linux-gnu, against
#    Debian's arm64 Python 3.11 headers and numpy's aarch64 wheel (the build's own setup.py,
#    told the target by _PYTHON_HOST_PLATFORM and the arm64 sysconfig data).
# 2. Checks the NEON packets against scalar.h bit for bit (tests/test_arch_levels.py), then
#    runs the kernel tests with Debian's aarch64 CPython under qemu-user, with numpy, scipy
#    and pytest from their aarch64 wheels: every kernel at the NEON level against numpy and
#    bit for bit against the plain C path.
#
# Where the toolchain cannot be had (not Debian on x86-64, not root, the arm64 packages or
# wheels unreachable) it says so and skips (exit 0); a build or test failure fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
py=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/mshadow-arm64.XXXXXX")
trap 'rm -rf "$work"' EXIT

skip() { echo "arm64 check: SKIPPED: $*"; exit 0; }

echo "+ the aarch64 toolchain (Debian multiarch) and qemu-user"
command -v dpkg > /dev/null && command -v apt-get > /dev/null || skip "no dpkg/apt-get (not Debian)"
[ "$(dpkg --print-architecture)" = amd64 ] || skip "host is $(dpkg --print-architecture), not amd64"
[ "$(id -u)" = 0 ] || skip "installing the toolchain needs root"
dpkg --add-architecture arm64
apt-get update -q > "$work/apt.log" 2>&1 || { tail -5 "$work/apt.log"; skip "apt-get update failed"; }
apt-get install -y -q --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
    qemu-user libpython3.11-dev:arm64 libpython3.11-stdlib:arm64 libstdc++6:arm64 \
    libgomp1:arm64 >> "$work/apt.log" 2>&1 || { tail -5 "$work/apt.log"; skip "apt-get install failed"; }
# the interpreter itself is not co-installable with the host's python3.11: unpack it
(cd "$work" && apt-get download python3.11-minimal:arm64 >> apt.log 2>&1) \
    || skip "apt-get download python3.11-minimal:arm64 failed"
dpkg-deb -x "$work"/python3.11-minimal_*_arm64.deb "$work/root"
sysconfig_data=/usr/lib/python3.11/_sysconfigdata__aarch64-linux-gnu.py
[ -f "$sysconfig_data" ] || skip "no $sysconfig_data"
mkdir "$work/cfg" && cp "$sysconfig_data" "$work/cfg/"

echo "+ the NEON packets against scalar.h, compiled for aarch64 (host pytest, qemu-user)"
"$py" -m pytest -q -p no:cacheprovider -rs tests/test_arch_levels.py

echo "+ numpy, scipy and the test tools as aarch64 wheels"
"$py" -m pip download -q -d "$work/whl" --only-binary=:all: --implementation cp \
    --python-version 3.11 --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
    "numpy>=1.25" "scipy>=1.9" "threadpoolctl>=3" "pytest>=7" "hypothesis>=6" \
    > "$work/pip.log" 2>&1 || { tail -5 "$work/pip.log"; skip "pip download of aarch64 wheels failed"; }
# unpacked as the aarch64 interpreter's user site: found with no PYTHONPATH, which tests that
# start subprocesses with their own PYTHONPATH would drop
site="$work/user/lib/python3.11/site-packages"
for w in "$work"/whl/*.whl; do "$py" -m zipfile -e "$w" "$site"; done

echo "+ cross-compile for aarch64"
# with the build requirements of pyproject.toml (what pip's isolated build would take), not
# whatever setuptools the calling environment has
"$py" -m venv "$work/build"
reqs=$("$py" -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires']))") \
    || skip "reading pyproject.toml's build requirements needs Python 3.11 (tomllib)"
# shellcheck disable=SC2086
"$work/build/bin/python" -m pip install -q $reqs > "$work/pip-build.log" 2>&1 \
    || { tail -5 "$work/pip-build.log"; exit 1; }
mkdir "$work/src"
git ls-files -co --exclude-standard | grep -v '\.so$' | tar -cf - -T - | tar -xf - -C "$work/src"
cd "$work/src"
env _PYTHON_SYSCONFIGDATA_NAME=_sysconfigdata__aarch64-linux-gnu _PYTHON_HOST_PLATFORM=linux-aarch64 \
    PYTHONPATH="$work/cfg" CFLAGS="-I$site/numpy/_core/include" \
    "$work/build/bin/python" setup.py build_ext --inplace > "$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log"; exit 1; }
file mshadow/_core.cpython-311-aarch64-linux-gnu.so 2>/dev/null || ls mshadow/_core.*.so

echo "+ the kernel tests, aarch64 CPython under qemu-user"
# sys.executable is this wrapper, so the tests' subprocesses run under qemu too
mkdir "$work/bin"
cat > "$work/bin/python3" <<EOF
#!/bin/sh
exec qemu-aarch64 -L / -0 "\$0" "$work/root/usr/bin/python3.11" "\$@"
EOF
chmod +x "$work/bin/python3"
export PYTHONUSERBASE="$work/user" MSHADOW_BUILD_QUIET=1
"$work/bin/python3" -c "import platform, mshadow as ms; print(platform.machine(), ms.simd_info())"
"$work/bin/python3" -c "import mshadow as ms, sys; sys.exit(ms.simd_info()['detected'] != 'neon')"
"$work/bin/python3" -m pytest -q -p no:cacheprovider \
    tests/test_vmath.py tests/test_short_runs.py tests/test_reduce_fused.py tests/test_plan.py \
    tests/test_reducer_table.py tests/test_nn.py tests/test_narrow_rows.py tests/test_conv2d.py \
    tests/test_expr_api.py tests/test_implicit_dot.py tests/test_extension_spatial.py \
    tests/test_column_fold.py
cd "$repo"
echo "arm64 check: ok"
