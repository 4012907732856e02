"""Random: seeding (std::mt19937-compatible), sampler distributions, pitch handling, errors."""
import numpy as np
import pytest

import mshadow as ms
from mshadow import Random

N = 100_000


def _samples(method, *args, dtype=ms.float32, seed=1):
    r = Random(seed=seed, dtype=dtype)
    t = ms.new_tensor((N // 100, 100), init=0, pad=True, dtype=dtype)
    assert getattr(r, method)(t, *args) is t
    return t.numpy().astype(np.float64).ravel()


def _check_moments(x, mean, var, var_rtol=0.05):
    assert abs(x.mean() - mean) < 6 * np.sqrt(var / x.size), (x.mean(), mean)
    assert x.var() == pytest.approx(var, rel=var_rtol)


# ---- the engine ---------------------------------------------------------------------------

def test_raw_draws_match_std_mt19937():
    # values of std::mt19937 (C++11 [rand.predef] requires the 10000th of 5489 to be 4123659995)
    r = Random(seed=5489)
    assert r.get_rand_int() == 3499211612
    r.seed(5489)
    draws = [r.GetRandInt() for _ in range(10000)]
    assert draws[-1] == 4123659995
    assert Random(seed=0).get_rand_int() == 2357136044


def test_seed_reproducible_and_get_seed():
    a, b = Random(seed=42), Random(seed=42)
    ta, tb = ms.new_tensor((50,)), ms.new_tensor((50,))
    a.sample_gaussian(ta)
    b.sample_gaussian(tb)
    np.testing.assert_array_equal(ta.numpy(), tb.numpy())
    a.sample_gaussian(ta)                     # the sequence moves on ...
    assert not np.array_equal(ta.numpy(), tb.numpy())
    a.seed(42)                                # ... and seed() restarts it
    a.sample_gaussian(ta)
    np.testing.assert_array_equal(ta.numpy(), tb.numpy())
    assert a.get_seed() == a.GetSeed() == 42
    assert Random(seed=-1).get_seed() == 0xFFFFFFFF   # unsigned, as in C++
    Random(seed=7).sample_gaussian(tb)
    assert not np.array_equal(ta.numpy(), tb.numpy())


@pytest.mark.parametrize("method, args", [("sample_uniform", (-1, 3)), ("sample_gaussian", (1, 2)),
                                          ("sample_gamma", (2, 3)), ("sample_poisson", (4,))])
def test_padded_tensor_filled_row_by_row(method, args):
    backing = np.full((7, 8), -99, np.float32)
    padded = ms.from_numpy(backing[:, :5])    # rows 8 apart; columns 5..7 are padding
    plain = ms.new_tensor((7, 5), init=0, pad=False)
    assert padded.stride == 8 and plain.stride == 5
    getattr(Random(seed=3), method)(padded, *args)
    getattr(Random(seed=3), method)(plain, *args)
    np.testing.assert_array_equal(padded.numpy(), plain.numpy())
    assert (backing[:, 5:] == -99).all()      # the padding is not written
    aligned = ms.new_tensor((7, 5), init=0, pad=True)
    getattr(Random(seed=3), method)(aligned, *args)
    np.testing.assert_array_equal(aligned.numpy(), plain.numpy())


def test_numpy_array_target():
    a = np.zeros((3, 4), np.float32)
    Random(seed=1).sample_uniform(a, 2, 3)
    assert ((a >= 2) & (a < 3)).all()


# ---- distributions ------------------------------------------------------------------------

def test_uniform_float():
    x = _samples("sample_uniform", -2, 6)
    assert x.min() >= -2 and x.max() < 6
    _check_moments(x, 2, 64 / 12)


@pytest.mark.parametrize("dtype", [ms.float16, ms.float32, ms.float64], ids=str)
def test_uniform_is_half_open_after_rounding(dtype):
    x = _samples("sample_uniform", 0, 1, dtype=dtype)
    assert x.max() < 1 and x.min() >= 0


@pytest.mark.parametrize("dtype", [ms.int32, ms.int64, ms.int8, ms.uint8], ids=str)
def test_uniform_int_inclusive(dtype):
    x = _samples("sample_uniform", 2, 6, dtype=dtype)
    values, counts = np.unique(x, return_counts=True)
    assert values.tolist() == [2, 3, 4, 5, 6]
    assert np.allclose(counts / N, 0.2, atol=0.01)


def test_gaussian():
    _check_moments(_samples("sample_gaussian", 3, 2), 3, 4)
    x64 = _samples("sample_gaussian", dtype=ms.float64)
    _check_moments(x64, 0, 1)


@pytest.mark.parametrize("sigma", [0, -1.5])
def test_gaussian_sigma_not_positive_fills_mu(sigma):
    t = ms.new_tensor((3, 4), init=0, pad=True)
    Random().sample_gaussian(t, 2.5, sigma)
    assert (t.numpy() == 2.5).all()


def test_gamma():
    _check_moments(_samples("sample_gamma", 2.0, 3.0), 6, 18)


def test_exponential():
    _check_moments(_samples("sample_exponential", 4.0), 0.25, 1 / 16)


def test_poisson():
    _check_moments(_samples("sample_poisson", 3.5), 3.5, 3.5)
    x = _samples("sample_poisson", 3.5, dtype=ms.int32)
    assert (x == np.round(x)).all()
    _check_moments(x, 3.5, 3.5)


def test_negative_binomial():
    k, p = 5, 0.4
    _check_moments(_samples("sample_negative_binomial", k, p), k * (1 - p) / p, k * (1 - p) / p ** 2)


@pytest.mark.parametrize("mu, alpha", [(4.0, 0.5), (4.0, 0.0)])
def test_generalized_negative_binomial(mu, alpha):
    x = _samples("sample_generalized_negative_binomial", mu, alpha)
    _check_moments(x, mu, mu + alpha * mu ** 2)


def test_generalized_negative_binomial_alpha0_is_poisson():
    a = _samples("sample_generalized_negative_binomial", 4.0, 0.0, seed=9)
    b = _samples("sample_poisson", 4.0, seed=9)
    np.testing.assert_array_equal(a, b)


# ---- gaussian(shape) / uniform(shape) -------------------------------------------------------

def test_buffer_expressions_valid_until_next_call():
    r = Random(seed=5)
    g = r.gaussian((4, 3))
    assert isinstance(g, ms.Tensor) and g.shape == (4, 3) and g.dtype == ms.float32
    first = g.numpy().copy()
    u = r.uniform((4, 3), 10, 11)             # reuses the buffer: g now shows u's values
    np.testing.assert_array_equal(g.numpy(), u.numpy())
    assert not np.array_equal(first, g.numpy())
    assert ((u.numpy() >= 10) & (u.numpy() < 11)).all()
    big = r.gaussian((1000, 10), 0, 0.5)      # grows: the old view still points at valid memory
    assert big.shape == (1000, 10) and abs(big.numpy().std() - 0.5) < 0.02
    np.testing.assert_array_equal(g.numpy(), u.numpy())
    r.seed(5)
    np.testing.assert_array_equal(r.gaussian((4, 3)).numpy(), first)


# ---- errors and aliases ---------------------------------------------------------------------

def test_errors():
    r = Random(dtype=ms.float32)
    with pytest.raises(ms.DTypeError, match="cannot fill a float64 tensor"):
        r.sample_uniform(ms.new_tensor((3,), dtype=ms.float64))
    ri = Random(dtype=ms.int32)
    for method in ("sample_gaussian", "sample_gamma", "sample_exponential"):
        with pytest.raises(ms.DTypeError, match="only support floating point types"):
            getattr(ri, method)(ms.new_tensor((3,), dtype=ms.int32))
    with pytest.raises(ms.DeviceError, match="CUDA"):
        Random(ms.gpu)
    with pytest.raises(ValueError, match="a <= b"):
        r.sample_uniform(ms.new_tensor((3,)), 2, 1)
    with pytest.raises(ValueError, match="lambda_ > 0"):
        r.sample_exponential(ms.new_tensor((3,)), 0)
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        r.sample_gaussian(ro)
    assert (ro == 0).all()


def test_cpp_spellings():
    r = Random()
    for cpp, py in [("SampleUniform", "sample_uniform"), ("SampleGaussian", "sample_gaussian"),
                    ("SampleGamma", "sample_gamma"), ("SampleExponential", "sample_exponential"),
                    ("SamplePoisson", "sample_poisson"),
                    ("SampleNegativeBinomial", "sample_negative_binomial"),
                    ("SampleGeneralizedNegativeBinomial", "sample_generalized_negative_binomial"),
                    ("Seed", "seed"), ("GetSeed", "get_seed"), ("GetRandInt", "get_rand_int"),
                    ("GetRndEngine", "get_rnd_engine")]:
        assert getattr(Random, cpp) is getattr(Random, py)
    assert isinstance(r.get_rnd_engine(), np.random.Generator)
    r.set_stream(None)
