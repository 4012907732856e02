"""The SIMD levels of each architecture: x86-64's SSE2, AVX2 and AVX-512, arm64's NEON.

One generated header serves both (codegen_cpu.ARCH_ISAS, each architecture under its macro),
so these checks run on any machine: NEON's packet vocabulary is SSE2's, and every kernel the
generator writes per ISA has its NEON twin. Where Debian's aarch64 cross compiler and
qemu-user are installed (.ci/arm64_check.sh installs them), the NEON packets are compiled for
aarch64 and compared with scalar.h bit for bit on signed zeros, NaN payloads, infinities and
subnormals. .ci/arm64_check.sh then runs the kernel tests themselves on an emulated aarch64.
"""
import pathlib
import re
import shutil
import subprocess

import pytest

from mshadow import codegen_cpu

INCLUDE = pathlib.Path(codegen_cpu.__file__).resolve().parent / "include"
PACKET = INCLUDE / "mshadow" / "packet"
HARNESS = pathlib.Path(__file__).resolve().parent / "native" / "neon_vs_scalar.c"


def _functions(text, isa):
    """The ``ms_<isa>_<name>_<code>`` functions a packet header defines, as (name, code)."""
    found = set(re.findall(rf"\bms_{isa}_(\w+?)_(f32|f64)\s*\(", text))
    found |= {(name, code) for name in re.findall(rf"\bms_{isa}_(\w+?)_##t\s*\(", text)
              for code in ("f32", "f64")}
    return found


def test_neon_defines_every_packet_function_sse2_does():
    sse2 = _functions((PACKET / "sse2.h").read_text(), "sse2")
    neon = _functions((PACKET / "neon.h").read_text(), "neon")
    assert len(sse2) > 30
    assert sse2 <= neon, sorted(sse2 - neon)


def _sections(text):
    """{macro: the text emitted under #if/#elif macro} of the per-architecture blocks."""
    out = {macro: [] for macro, _ in codegen_cpu.ARCH_ISAS}
    current = None
    for line in text.splitlines():
        m = re.match(r"#(?:if|elif) (MS_X86|MS_ARM64)$", line)
        if m:
            current = m.group(1)
        elif line == "#endif":
            current = None
        elif current:
            out[current].append(line)
    return {macro: "\n".join(lines) for macro, lines in out.items()}


@pytest.fixture(scope="module")
def header():
    return codegen_cpu.generate()


def test_every_per_isa_kernel_has_a_neon_twin(header):
    sec = _sections(header)
    def defined(isa, text):   # ms_chain_f32_<isa>, and ms_<isa>_exp_f32 (vmath) as ms_@_exp_f32
        names = re.findall(rf"^static [^=;{{]*?\b(ms_\w+?)_{isa}\(", text, re.M)
        names += [f"ms_@_{n}" for n in
                  re.findall(rf"^static [^=;{{]*?\bms_{isa}_(\w+)\(", text, re.M)]
        return set(names)
    x86, arm = defined("sse2", sec["MS_X86"]), defined("neon", sec["MS_ARM64"])
    assert len(x86) > 80
    assert x86 == arm, (sorted(x86 - arm), sorted(arm - x86))
    # nothing of x86 on arm64 and nothing of arm64 on x86
    assert not re.search(r"_sse2_|_avx2_|_avx512_|_mm\d*_", sec["MS_ARM64"])
    assert "_neon" not in sec["MS_X86"]


def test_dispatch_tables_hold_each_architectures_levels(header):
    sec = _sections(header)
    for macro, isas in codegen_cpu.ARCH_ISAS:
        tables = re.findall(r"_tab\[4\]\)?[^=]*= \{([^}]*)\};", sec[macro])
        tables += re.findall(r"ms_chain_unrolled_\w+\[4\] = \{([^}]*)\};", sec[macro])
        assert len(tables) > 20, macro
        for entries in tables:
            assert len(entries.split(",")) == 1 + len(isas), (macro, entries)


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (.ci/arm64_check.sh installs it)")
    return path


def test_neon_packets_give_scalar_bits_on_aarch64(tmp_path):
    cc, qemu = _tool("aarch64-linux-gnu-gcc"), _tool("qemu-aarch64")
    exe = tmp_path / "neon_vs_scalar"
    # the extension's own flags that matter for bits: no contraction into FMA
    subprocess.run([cc, "-O2", "-ffp-contract=off", "-Wall", "-Werror", f"-I{INCLUDE}",
                    str(HARNESS), "-o", str(exe), "-lm"], check=True, capture_output=True)
    sysroot = "/usr/aarch64-linux-gnu"   # Debian's cross libc, where the binary's loader is
    r = subprocess.run([qemu, "-L", sysroot, str(exe)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: 0 mismatches" in r.stdout


# the hand-written headers that need neither numpy nor the generated ones
STANDALONE_HEADERS = ("alloc.h", "half.h", "panel_gemm.h", "transpose.h")


@pytest.mark.parametrize("name", STANDALONE_HEADERS)
def test_standalone_headers_compile_for_aarch64(name):
    # their non-x86 branches (panel_gemm.h's stubs) are compiled nowhere else before the
    # arm64 cross build: a stub's signature once drifted from its kernel's and only CI's
    # cross build found it
    cc = _tool("aarch64-linux-gnu-gcc")
    r = subprocess.run([cc, "-x", "c", "-fsyntax-only", "-fopenmp", "-Wall", "-Werror",
                        f"-I{INCLUDE}", "-"], input=f'#include "mshadow/{name}"\n',
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_level_names_are_the_generators():
    # packet.h names the levels (ms_isa_names) and numbers them; codegen_cpu.ARCH_ISAS emits
    # the kernels of each: the two must list the same ISAs in the same order
    import mshadow as ms
    header = (INCLUDE / "mshadow" / "packet.h").read_text()
    for macro, isas in codegen_cpu.ARCH_ISAS:
        block = header.split(f"#{'if' if macro == 'MS_X86' else 'elif'} {macro}\n", 1)[1]
        names = re.search(r"ms_isa_names\[\] = \{([^}]*)\}", block).group(1)
        assert [n.strip().strip('"') for n in names.split(",")] == ["plain", *isas, "NULL"]
    compiled = ms.simd_info()["compiled"]
    assert any(compiled[1:] == isas for _, isas in codegen_cpu.ARCH_ISAS) or compiled == ("plain",)


FMA_HARNESS = pathlib.Path(__file__).resolve().parent / "native" / "fma_exact.c"


def test_software_fma_rounds_once(tmp_path):
    """vmath's bodies use fused multiply-adds, and the levels without an FMA instruction
    (SSE2, and the scalar member's software variant) must round a * b + c once, as the
    instruction does: scalar.h's round-to-odd in double and sse2.h's lanes, against the CPU's
    FMA on specials, random triples and halfway products nudged by a tiny c (a sticky bit
    lost there passes the other cases)."""
    import platform

    import mshadow as ms
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the harness is x86-64's (arm64's fma is an instruction at every level)")
    if ms.simd_info()["detected"] not in ("avx2", "avx512"):
        pytest.skip("this CPU has no FMA instruction to compare with")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "fma_exact"
    subprocess.run([cc, "-O2", "-msse2", "-ffp-contract=off", "-Wall", "-Werror",
                    f"-I{INCLUDE}", str(FMA_HARNESS), "-o", str(exe), "-lm"],
                   check=True, capture_output=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "mismatches: 0" in r.stdout, r.stdout + r.stderr
