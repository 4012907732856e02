"""mshadow.cuda.cache: CUBINs compiled once per (source, NVRTC version, arch, options), kept in
a bounded memory table and on disk with atomic writes. A counting fake compiler checks the
bookkeeping everywhere; NVRTC (when installed) compiles an emitted kernel for real."""
import os
import threading

import pytest

import mshadow as ms
from mshadow.cuda import _cuda as cuda   # NVRTC itself, whatever MSHADOW_CUDA says
from mshadow.cuda.cache import OPTIONS, KernelCache, default_directory

ELF = b"\x7fELF"


class FakeNVRTC:
    """A compiler that returns an ELF-looking image naming its inputs, and counts calls."""

    def __init__(self):
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, source, arch, options):
        with self.lock:
            self.calls += 1
        return ELF + f"|{arch}|{','.join(options)}|{source}".encode()


def make(tmp_path, **kw):
    fake = FakeNVRTC()
    return KernelCache(str(tmp_path), compile=fake, version=(13, 5), **kw), fake


def test_compiles_once_then_memory_then_disk(tmp_path):
    cache, fake = make(tmp_path)
    a = cache.cubin("kernel A", "sm_90")
    assert cache.cubin("kernel A", "sm_90") == a and fake.calls == 1
    assert cache.stats()[:3] == (1, 0, 1)
    again = KernelCache(str(tmp_path), compile=FakeNVRTC(), version=(13, 5))
    assert again.cubin("kernel A", "sm_90") == a          # another process: from disk
    assert again.stats().disk_hits == 1 and again.stats().compiles == 0
    files = [f for _, _, fs in os.walk(tmp_path) for f in fs]
    assert len(files) == 1 and files[0].endswith(".cubin")   # no temporary left behind


@pytest.mark.parametrize("change", ["source", "arch", "options", "version"])
def test_every_part_of_the_key_gives_another_entry(tmp_path, change):
    cache, fake = make(tmp_path)
    cache.cubin("k", "sm_90")
    other = KernelCache(str(tmp_path), compile=fake,
                        version=(13, 6) if change == "version" else (13, 5))
    other.cubin("k2" if change == "source" else "k", "sm_80" if change == "arch" else "sm_90",
                OPTIONS + ("-lineinfo",) if change == "options" else OPTIONS)
    assert fake.calls == 2 and other.stats().disk_hits == 0


def test_memory_is_bounded_least_recently_used_first(tmp_path):
    cache, fake = make(tmp_path / "none", capacity=2)
    cache.directory = None                                  # memory only
    for s in ("a", "b", "a", "c"):                          # "b" is the least recent
        cache.cubin(s, "sm_90")
    assert cache.stats().entries == 2 and fake.calls == 3
    cache.cubin("a", "sm_90")
    cache.cubin("c", "sm_90")
    assert fake.calls == 3
    cache.cubin("b", "sm_90")
    assert fake.calls == 4
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        KernelCache(None, capacity=0)


def test_a_damaged_file_is_compiled_again_and_replaced(tmp_path):
    cache, fake = make(tmp_path)
    good = cache.cubin("k", "sm_90")
    path = cache._path(cache.key("k", "sm_90"))
    with open(path, "wb") as f:
        f.write(good[:3])                                   # truncated: not an ELF image
    fresh, fake2 = make(tmp_path)
    assert fresh.cubin("k", "sm_90") == good and fake2.calls == 1
    with open(path, "rb") as f:
        assert f.read() == good


def test_an_unusable_directory_leaves_the_cache_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    cache, fake = make(blocker / "cuda")                    # makedirs fails under a file
    assert cache.cubin("k", "sm_90").startswith(ELF)
    assert cache.cubin("k", "sm_90").startswith(ELF) and fake.calls == 1
    assert cache.stats().disk_errors == 1


def test_a_compile_error_keeps_nothing(tmp_path):
    def broken(source, arch, options):
        raise ms.CudaError("NVRTC could not compile: boom")
    cache = KernelCache(str(tmp_path), compile=broken, version=(13, 5))
    with pytest.raises(ms.CudaError, match="boom"):
        cache.cubin("k", "sm_90")
    assert cache.stats().entries == 0 and not any(fs for _, _, fs in os.walk(tmp_path))


def test_threads_asking_for_one_kernel_get_whole_files(tmp_path):
    cache, fake = make(tmp_path)
    got, errors = [], []

    def ask():
        try:
            for i in range(20):
                got.append(cache.cubin(f"kernel {i}", "sm_90"))
        except Exception as e:              # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 160
    fresh, fake2 = make(tmp_path)
    for i in range(20):
        assert fresh.cubin(f"kernel {i}", "sm_90").endswith(f"|kernel {i}".encode())
    assert fake2.calls == 0
    assert not [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".tmp")]


def test_default_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MSHADOW_CUDA_CACHE", str(tmp_path / "c"))
    assert default_directory() == str(tmp_path / "c")
    for off in ("", "0"):
        monkeypatch.setenv("MSHADOW_CUDA_CACHE", off)
        assert default_directory() is None
    monkeypatch.delenv("MSHADOW_CUDA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_directory() == os.path.join(str(tmp_path / "xdg"), "mshadow", "cuda")


def _have_nvrtc():
    try:
        cuda.nvrtc_version()
        return True
    except ms.CudaError:
        return False


@pytest.mark.skipif(not _have_nvrtc(), reason="NVRTC is not installed "
                    "(pip install 'mshadow[cuda]')")
def test_nvrtc_compiles_an_emitted_kernel_once(tmp_path):
    from mshadow.cuda.lower import emit
    a = ms.new_tensor((3, 4), 1.0)
    k = emit((ms.F(ms.op.exp, a) * 2.0).key, "f32", "saveto")
    cache = KernelCache(str(tmp_path), driver=cuda)
    cubin = cache.cubin(k.source, "sm_80")
    assert cubin.startswith(ELF) and k.name.encode() in cubin
    assert KernelCache(str(tmp_path), driver=cuda).cubin(k.source, "sm_80") == cubin   # disk
    assert cache.key(k.source, "sm_80") != cache.key(k.source, "sm_90")
