"""Reductions over narrow rows: several rows a block in registers (plan_exec.h
ms_rows_per_block), each row still reduced alone into its own partial (a call a row)."""
import numpy as np
import pytest

import mshadow as ms


@pytest.mark.parametrize("shape", [(200, 1), (256, 1), (256, 2), (100, 3), (128, 49), (7, 64)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_each_narrow_row_its_own_sum(shape, dtype):
    rng = np.random.default_rng(shape[0] + shape[1])
    v = rng.integers(-50, 50, shape).astype(dtype)       # sums exact in every order
    x = ms.from_numpy(v)
    y = ms.new_tensor((shape[0],), dtype=dtype)
    y[:] = ms.reduce_with_axis(x * 1, 1, ms.red.sum)
    assert np.array_equal(y.numpy(), v.sum(1, dtype=dtype))
    k = ms.new_tensor((shape[0], 1), dtype=dtype)
    k[:] = ms.reduce_keepdim(x + 0, 1, ms.red.sum)
    assert np.array_equal(k.numpy(), v.sum(1, keepdims=True, dtype=dtype))
