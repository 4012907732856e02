"""Shared fixtures: every supported dtype, and sample data that fits each of them."""
import numpy as np
import pytest

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
