"""What the ms.gpu test files share: the device they run on and gpu tensors made from numpy.
A test file imports ``gpu_device`` (an autouse fixture: importing it applies it there)."""
import os

import numpy as np
import pytest

import mshadow as ms
from mshadow import cuda


@pytest.fixture(autouse=True)
def gpu_device(monkeypatch):
    """The emulated device unless the environment chose one (a real GPU run sets nothing
    and needs a device: it skips where there is none)."""
    if os.environ.get("MSHADOW_CUDA") is None and not cuda.available():
        monkeypatch.setenv("MSHADOW_CUDA", "emulate")
    if cuda.driver().__name__.endswith("emulate") and cuda.driver().compiler() is None:
        pytest.skip("no g++: the emulated device compiles kernels with it")


def gpu_from(a, pad=True):
    """A gpu tensor holding ``a``'s values."""
    t = ms.new_tensor(a.shape, None, dtype=a.dtype, device=ms.gpu, pad=pad)
    ms.copy(t, ms.from_numpy(np.ascontiguousarray(a)))
    return t


def cpu_from(a, pad=True):
    """A cpu tensor holding ``a``'s values (the oracle's operand beside gpu_from's)."""
    t = ms.new_tensor(a.shape, None, dtype=a.dtype, pad=pad)
    t.numpy()[...] = a
    return t


MAKERS = {"cpu": cpu_from, "gpu": gpu_from}


def host(t):
    """A host copy of a cpu or gpu tensor's values."""
    return t.to_numpy() if t.device is ms.gpu else t.numpy().copy()


def store(dst, value, saver):
    """The statement ``dst <saver> value`` as a user writes it (``=``, ``+=``, ``-=``,
    ``*=``, ``/=``)."""
    if saver == "=":
        dst[:] = value
    elif saver == "+=":
        dst += value
    elif saver == "-=":
        dst -= value
    elif saver == "*=":
        dst *= value
    else:
        assert saver == "/="
        dst /= value
    return dst
