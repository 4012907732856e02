"""Shared fixtures: every supported dtype, sample data that fits each of them, and the
engine state restored after the tests that change it."""
import numpy as np
import pytest

import mshadow as ms
from mshadow.dtypes import ALL_DTYPES


@pytest.fixture(params=ALL_DTYPES, ids=lambda d: d.name)
def dtype(request):
    """Each dtype mshadow supports (float32, float64, float16, uint8, int8, int32, int64)."""
    return request.param


@pytest.fixture
def sample():
    """``sample(shape, dtype)``: distinct, exactly representable values (0..99, repeating)."""
    def make(shape, dtype):
        n = int(np.prod(shape))
        return (np.arange(n) % 100).astype(dtype).reshape(shape)
    return make


@pytest.fixture
def restore_engine_state():
    """The SIMD level and thread count as they were before the test (tests that switch
    them use this: ``pytestmark = pytest.mark.usefixtures("restore_engine_state")``)."""
    level, threads = ms.simd_info()["active"], ms.get_num_threads()
    yield
    ms.set_simd_level(level)
    ms.set_num_threads(threads)
