"""MSHADOW_CUDA picks the driver behind mshadow.cuda (mshadow.cuda.driver()): the real loader
unless it says ``emulate``; the two drivers have one API (names, signatures), and the kernel
cache keeps their images apart."""
import inspect
import os

import pytest

import mshadow as ms
import mshadow.cuda as cuda
from mshadow.cuda import _cuda, emulate
from mshadow.cuda.cache import KernelCache, kernel_cache


def test_unset_or_empty_is_the_real_driver(monkeypatch):
    monkeypatch.delenv("MSHADOW_CUDA", raising=False)
    assert cuda.driver() is _cuda and cuda.Memory is _cuda.Memory
    monkeypatch.setenv("MSHADOW_CUDA", "")
    assert cuda.driver() is _cuda and cuda.available is _cuda.available


def test_emulate_is_the_emulated_device(monkeypatch):
    monkeypatch.setenv("MSHADOW_CUDA", "emulate")
    assert cuda.driver() is emulate
    for name in ("Memory", "Stream", "Event", "Module", "Function", "BlasHandle",
                 "compile_cubin", "available", "device_attributes", "elapsed_time"):
        assert getattr(cuda, name) is getattr(emulate, name)
    assert cuda.available() and cuda.unavailable_reason() is None
    from mshadow.cuda import Memory            # a from-import resolves the same way
    assert Memory is emulate.Memory
    assert cuda.CudaError is ms.CudaError


def test_another_value_is_an_error_naming_the_accepted_ones(monkeypatch):
    monkeypatch.setenv("MSHADOW_CUDA", "Emulate")
    with pytest.raises(ms.CudaError) as info:
        cuda.Memory
    assert str(info.value) == ("MSHADOW_CUDA='Emulate' is not a CUDA driver mshadow has: "
                               "leave MSHADOW_CUDA unset (or empty) for the real device, or "
                               "set MSHADOW_CUDA=emulate for the emulated one")
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        cuda.nonsense
    assert {"driver", "Memory", "BlasHandle"} <= set(dir(cuda))


def test_importing_mshadow_cuda_loads_no_driver_and_opens_nothing(run_child):
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps (Linux)")
    r = run_child("import sys, mshadow.cuda as cuda\n"
                  "maps = open('/proc/self/maps').read()\n"
                  "print('mshadow.cuda.emulate' in sys.modules, "
                  "any(n in maps for n in ('libcuda', 'libnvrtc', 'libcublas')))\n"
                  "print(cuda.driver().__name__, cuda.available())\n", MSHADOW_CUDA="emulate")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["False False", "mshadow.cuda.emulate True"]


def _public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


@pytest.mark.parametrize("name", sorted(cuda._DRIVER_NAMES))
def test_both_drivers_have_one_api(name):
    real, emu = getattr(_cuda, name), getattr(emulate, name)
    if not inspect.isclass(real):
        assert inspect.signature(emu) == inspect.signature(real)
        return
    assert _public(real) <= _public(emu), _public(real) - _public(emu)
    for attr in _public(real):
        r, e = inspect.getattr_static(real, attr), inspect.getattr_static(emu, attr)
        if callable(getattr(real, attr)):
            assert inspect.signature(getattr(emu, attr)) == \
                inspect.signature(getattr(real, attr)), f"{name}.{attr}"
        else:                                # a property on both (read-only)
            assert hasattr(r, "__get__") and isinstance(e, property), f"{name}.{attr}"


@pytest.mark.skipif(emulate.compiler() is None, reason="no g++ for the emulated device")
def test_the_kernel_cache_serves_the_driver_in_use(monkeypatch, tmp_path):
    src = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n'
    cache = KernelCache(str(tmp_path), driver=emulate)
    image = cache.cubin(src, "sm_90")
    assert emulate.image_ok(image) and cache.stats().compiles == 1
    again = KernelCache(str(tmp_path), driver=emulate)
    assert again.cubin(src, "sm_90") == image and again.stats().disk_hits == 1
    [path] = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    with open(path, "wb") as f:
        f.write(image[:-5])                     # truncated: not a whole image
    fresh = KernelCache(str(tmp_path), driver=emulate)
    assert fresh.cubin(src, "sm_90") == image and fresh.stats().compiles == 1
    # the real and the emulated device never share an entry
    real = KernelCache(str(tmp_path), compile=lambda *a, **k: b"\x7fELF", version=(13, 0))
    assert real.key(src, "sm_90") != cache.key(src, "sm_90")
    monkeypatch.setenv("MSHADOW_CUDA", "emulate")
    assert emulate.image_ok(kernel_cache().cubin(src, "sm_90"))
    assert kernel_cache() is kernel_cache()
