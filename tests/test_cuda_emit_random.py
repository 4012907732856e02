"""The CUDA random kernels (mshadow/cuda/lower.py emit_random): Philox4x32-10, counter-based.
A numpy Philox, checked against Random123's known-answer vectors, is the oracle of the
uniform streams, bit for bit, on the host SIMT harness (tests/cuda_host.py) for odd sizes,
pitched tensors, seeds and offsets, whatever the grid; the gaussian ones agree with
Box-Muller on numpy within rounding and have the asked mean and deviation."""
import numpy as np
import pytest

from mshadow.cuda.lower import emit_random

import cuda_host
from test_cuda_emit import compile_all, needs_gxx, needs_nvrtc

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint64 arrays holding 32-bit words (Salmon et al., SC11)."""
    c = [np.asarray(v, np.uint64) for v in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0, p1 = np.uint64(M0) * c[0], np.uint64(M1) * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ k0) & np.uint64(MASK), p1 & np.uint64(MASK),
             ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & np.uint64(MASK), p0 & np.uint64(MASK)]
        k0, k1 = (k0 + np.uint64(W0)) & np.uint64(MASK), (k1 + np.uint64(W1)) & np.uint64(MASK)
    return c


# Random123's kat_vectors for philox4x32_10: (counter, key, result)
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((MASK,) * 4, (MASK,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.mark.parametrize("ctr, key, want", KAT)
def test_the_numpy_philox_gives_the_known_answers(ctr, key, want):
    assert tuple(int(w) for w in philox(*ctr, *key)) == want


def words(n, per, seed, offset):
    """The Philox words element i of n reads: its block's 4 words, from (i % per) * (4/per)."""
    i = np.arange(n, dtype=np.uint64)
    ctr = np.uint64(offset) + i // np.uint64(per)
    w = np.stack(philox(ctr & np.uint64(MASK), ctr >> np.uint64(32), 0, 0,
                        seed & MASK, seed >> 32), axis=1)             # (n, 4)
    j = (i % np.uint64(per)).astype(np.int64) * (4 // per)
    return np.stack([w[np.arange(n), j + t] for t in range(4 // per)], axis=1)


def unit(w, code, plus1=False):
    if code == "f32":
        return ((w[:, 0] >> np.uint64(8)) + np.uint64(plus1)).astype(np.float32) \
            * np.float32(2.0 ** -24)
    bits = ((w[:, 0] << np.uint64(32)) | w[:, 1]) >> np.uint64(11)
    return (bits + np.uint64(plus1)).astype(np.float64) * 2.0 ** -53


def expected(dist, code, n, seed, offset, a, b):
    per = {("uniform", "f32"): 4, ("uniform", "f64"): 2, ("gaussian", "f32"): 2,
           ("gaussian", "f64"): 1}[dist, code]
    w = words(n, per, seed, offset)
    dt = np.float32 if code == "f32" else np.float64
    a, b = dt(a), dt(b)
    if dist == "uniform":
        v = a + (b - a) * unit(w, code)
        return np.where((v < b) | ~(a < b), v, np.nextafter(b, a)).astype(dt)
    h = w.shape[1] // 2
    u1, u2 = unit(w[:, :h], code, True), unit(w[:, h:], code)
    with np.errstate(all="ignore"):
        return a + b * (np.sqrt(dt(-2) * np.log(u1)) * np.cos(dt(6.283185307179586) * u2))


def run(dist, code, shape, seed, offset, a, b, grid=(3, 1), block=8, pitch_pad=5):
    k = emit_random(dist, code)
    lib = cuda_host.build([k])
    dt = np.float32 if code == "f32" else np.float64
    wide = np.full((shape[0], shape[1] + pitch_pad), -7, dt)
    dst = wide[:, :shape[1]]
    cuda_host.run(lib, k, dst, (), (), grid=grid, block=block,
                  extra={"seed_lo": seed & MASK, "seed_hi": seed >> 32, "offset": offset,
                         "a": a, "b": b})
    assert (wide[:, shape[1]:] == -7).all()          # nothing past a row's end
    return dst.reshape(-1)


@needs_gxx
@pytest.mark.parametrize("code", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 13), (17, 31)])
def test_uniform_is_the_philox_stream_bit_for_bit(code, shape):
    for seed, offset, grid, block in ((0, 0, (3, 1), 8), (0x123456789A, 77, (1, 1), 3),
                                      (2 ** 64 - 1, 2 ** 40, (50, 1), 1)):
        got = run("uniform", code, shape, seed, offset, -2.0, 3.0, grid, block)
        want = expected("uniform", code, got.size, seed, offset, -2.0, 3.0)
        assert got.tobytes() == want.tobytes(), (shape, seed, offset)
        assert (got >= -2).all() and (got < 3).all()


@needs_gxx
def test_uniform_stays_below_b_where_rounding_reaches_it():
    """Regression: a + (b - a) * u rounded to b for about 1 draw in 400 here (float32
    integers near 2**24 are 1 apart); the CPU's sample_uniform keeps [a, b) half-open and
    so does the kernel now: those draws are the float below b."""
    a, b = 16777000.0, 16777216.0
    got = run("uniform", "f32", (40, 250), 9, 0, a, b, grid=(16, 1), block=32)
    raw = np.float32(a) + np.float32(b - a) * unit(words(got.size, 4, 9, 0), "f32")
    assert (raw == np.float32(b)).sum() > 5          # the case arises
    assert (got < np.float32(b)).all() and (got >= np.float32(a)).all()
    assert got.tobytes() == expected("uniform", "f32", got.size, 9, 0, a, b).tobytes()


@needs_gxx
@pytest.mark.parametrize("code", ["f32", "f64"])
def test_gaussian_is_box_muller_on_the_stream(code):
    got = run("gaussian", code, (199, 257), 42, 5, 1.5, 2.0, grid=(8, 1), block=32)
    want = expected("gaussian", code, got.size, 42, 5, 1.5, 2.0)
    np.testing.assert_allclose(got, want, rtol=1e-5 if code == "f32" else 1e-12, atol=1e-5)
    assert np.isfinite(got).all()
    assert abs(got.mean() - 1.5) < 0.03 and abs(got.std() - 2.0) < 0.03


@needs_gxx
def test_streams_differ_by_seed_and_offset_and_continue_by_offset():
    a = run("uniform", "f32", (4, 10), 1, 0, 0.0, 1.0)
    b = run("uniform", "f32", (4, 10), 2, 0, 0.0, 1.0)
    assert not np.array_equal(a, b)
    # 40 float32 uniforms use 10 counters: offset 10 continues the stream of 80
    both = run("uniform", "f32", (8, 10), 1, 0, 0.0, 1.0)
    later = run("uniform", "f32", (4, 10), 1, 10, 0.0, 1.0)
    assert both[:40].tobytes() == a.tobytes() and both[40:].tobytes() == later.tobytes()


def test_refuses_what_it_does_not_draw():
    with pytest.raises(ValueError, match="uniform.*gaussian"):
        emit_random("gamma", "f32")
    with pytest.raises(ValueError, match="float32"):
        emit_random("uniform", "f16")


@needs_nvrtc
def test_nvrtc_compiles_every_random_kernel():
    from mshadow.cuda.lower import RANDOM_PER_COUNTER
    ks = [emit_random(d, c) for d, c in RANDOM_PER_COUNTER]
    assert compile_all(ks) == 6
