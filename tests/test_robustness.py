"""Random calls across the extension, product and reduction API with random (often invalid)
shapes, dtypes, paddings and freed tensors: every failure is a typed mshadow/Python error,
never a crash and never an unexpected exception type."""
import random
import warnings

import numpy as np
import pytest

import mshadow as ms

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.int8, np.int64]
EXPECTED = (ms.MShadowError, ValueError, TypeError, IndexError, OverflowError, BufferError)


def _calls(rng):
    def rt():
        shape = tuple(rng.randint(0, 5) for _ in range(rng.randint(1, 4)))
        t = ms.new_tensor(shape, init=rng.randint(-3, 3), pad=rng.random() < 0.5,
                          dtype=rng.choice(DTYPES))
        if rng.random() < 0.1:
            ms.free_space(t)
        return t

    def ri(lo, hi):
        return rng.randint(lo, hi)

    return rt, [
        lambda: ms.broadcast(rt(), rt().shape, ri(-1, 3)),
        lambda: ms.pad(rt(), ri(-1, 3), ri(-1, 3)),
        lambda: ms.take(rt(), rt()),
        lambda: ms.mat_choose_row_element(rt(), rt()),
        lambda: ms.mat_fill_row_element(rt(), rt(), rt()),
        lambda: ms.upsampling_nearest(rt(), ri(-1, 3)),
        lambda: ms.one_hot_encode(rt(), ri(-1, 4)),
        lambda: ms.concat(rt(), rt(), ri(-1, 3)),
        lambda: ms.flip(rt(), ri(-3, 3)),
        lambda: ms.swapaxis(rt(), ri(-3, 3), ri(-3, 3)),
        lambda: ms.transpose_axes(rt(), [ri(0, 3) for _ in range(ri(1, 3))]),
        lambda: ms.crop(rt(), (ri(0, 4), ri(0, 4))),
        lambda: ms.slice_axis(rt(), ri(-2, 3), ri(-1, 3), ri(-1, 5)),
        lambda: ms.reshape(rt(), tuple(ri(0, 6) for _ in range(ri(1, 3)))),
        lambda: ms.pool(rt(), ri(0, 3), ri(0, 3), ri(0, 3), ri(0, 3)),
        lambda: ms.unpack_patch2col(rt(), ri(0, 3), ri(0, 3), ri(0, 3)),
        lambda: ms.chpool(rt(), ri(-1, 4), ms.red.sum),
        lambda: ms.implicit_dot(rt(), rt()),
        lambda: ms.dot(rt(), rt()),
        lambda: ms.batch_dot(rt(), rt()),
        lambda: ms.sum_rows(rt()),
        lambda: ms.sumall_except_dim(rt(), ri(-2, 3)),
        lambda: ms.reduce_with_axis(rt(), ri(-2, 3), ms.red.maximum, mask=rng.random() < 0.5),
        lambda: rt() + rt(),
        lambda: ms.F(ms.op.exp, rt()) * rt(),
        lambda: ms.tcast(rng.choice(DTYPES), rt()),
        lambda: rt().T,
        lambda: ms.range(ri(-3, 3), ri(-3, 3), rng.choice([-1, 1, 2]), ri(0, 2)),
    ]


@pytest.mark.parametrize("seed", range(4))
def test_random_api_calls_fail_only_with_typed_errors(seed):
    rng = random.Random(seed)
    rt, calls = _calls(rng)
    ran = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(400):
            try:
                e = rng.choice(calls)()
                d = rt() if rng.random() < 0.5 else ms.new_tensor(
                    e.shape, dtype=getattr(e, "dtype", np.float32), pad=rng.random() < 0.5)
                op = rng.choice(["=", "+=", "-=", "*=", "/="])
                if op == "=":
                    d[:] = e
                elif op == "+=":
                    d += e
                elif op == "-=":
                    d -= e
                elif op == "*=":
                    d *= e
                else:
                    d /= e
                ran += 1
            except EXPECTED:
                pass
    assert ran > 10      # some calls were valid and ran to the end
