"""Random: mshadow's random number generator (random.h) on numpy's MT19937 Generator.

Seeded as ``std::mt19937(seed)``: get_rand_int() gives C++'s raw draws (one, or a tensor
of them); the samplers are numpy's. A gpu Random (``Random(ms.gpu, seed)``) fills gpu
tensors with uniform and gaussian draws of Philox4x32-10 keyed by the seed, counter-based
(mshadow/cuda/lower.py emit_random): the values depend on the seed and the order of the
fills, never on the launch.
"""
import numpy as np

from .device import as_device, check_devices, cpu
from .dtypes import as_dtype, float32, FLOAT_DTYPES
from .errors import DeviceError, DTypeError
from .shape import as_shape


def _mt19937_key(seed):
    """``std::mt19937::seed(s)`` (init_genrand): the 624-word state it starts from."""
    key = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        prev = key[-1]
        key.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return np.array(key, dtype=np.uint32)


class Random:
    """``Random(device=cpu, seed=0, dtype=float32)``: fills tensors of ``dtype`` in place.

    Every sampler writes the tensor row by row (row-major order of its shape, whatever its
    pitch), so a seed gives the same values for padded and contiguous tensors alike.
    Exact sequences follow numpy's sampling algorithms, not libstdc++'s.
    """

    def __init__(self, device=cpu, seed=0, dtype=float32):
        self.device = as_device(device)
        if self.device is not cpu:      # a DeviceError saying why when there is no GPU
            from .cuda import require_device
            require_device("Random")
        self.dtype = as_dtype(dtype)
        self._bitgen = np.random.MT19937()
        self._gen = np.random.Generator(self._bitgen)
        self._buffer = None
        self._stream = None
        self.seed(seed)

    def seed(self, seed):
        """Restart the sequence from ``seed`` (``Seed``)."""
        self._seed = int(seed) & 0xFFFFFFFF
        self._bitgen.state = {"bit_generator": "MT19937",
                              "state": {"key": _mt19937_key(self._seed), "pos": 624}}
        self._counter = 0       # the GPU's: the next Philox counter of the seed's stream

    def get_seed(self):
        """The seed last given to ``seed()`` or the constructor (``GetSeed``)."""
        return self._seed

    def get_rand_int(self, dst=None):
        """One raw 32-bit draw of the engine, as ``std::mt19937::operator()``; or, given a
        tensor ``dst`` (``GetRandInt(Tensor<cpu, 1, unsigned>)``), fill it with raw draws
        in row-major order and return it.

        The draws continue the same sequence as the scalar form and the samplers: filling n
        elements gives what n calls of ``get_rand_int()`` would. ``dst`` must hold 32 or
        64-bit integers: int64 keeps each draw's value (0 .. 2**32 - 1); int32 keeps its 32
        bits (C++'s unsigned as int: draws >= 2**31 read negative). A numpy array of uint32
        (C++'s ``unsigned``) or uint64 is filled in place too. ``dst`` need not have the
        Random's dtype, as in C++.

        A gpu Random fills a gpu int32 / int64 tensor with raw words of its Philox stream
        (its uniform float32 draws are these words >> 8), continuing that stream; it has no
        scalar form (mshadow's ``Random<gpu>`` has none).
        """
        if self.device is not cpu and dst is not None:
            return self._gpu_fill(dst, "bits", 0, 0)
        self._cpu_only("get_rand_int")
        if dst is None:
            return int(self._bitgen.random_raw())
        if isinstance(dst, np.ndarray) and dst.dtype in (np.uint32, np.uint64):
            if not dst.flags.writeable:
                raise ValueError("Random: the tensor to fill is read-only")
            dst[...] = self._bitgen.random_raw(dst.size).reshape(dst.shape)
            return dst
        from ._core import Tensor, from_numpy
        if not isinstance(dst, (Tensor, np.ndarray)):   # a list would be filled as a copy
            raise TypeError(f"GetRandInt: expected a tensor or a numpy array to fill, got "
                            f"{type(dst).__name__}")
        t = from_numpy(dst)   # a Tensor passes through; a numpy array becomes a view
        if t.dtype not in (np.int32, np.int64):
            raise DTypeError(f"GetRandInt: the draws are 32-bit unsigned integers, so the "
                             f"tensor must hold int32 or int64 (or be a numpy uint32/uint64 "
                             f"array), got {t.dtype}")
        check_devices("Random", t.device)
        if t.readonly:
            raise ValueError("Random: the tensor to fill is read-only")
        a = t.numpy()
        draws = self._bitgen.random_raw(a.size).reshape(a.shape)
        a[...] = draws.astype(np.uint32).view(np.int32) if t.dtype == np.int32 else draws
        return t

    def get_rnd_engine(self):
        """The numpy Generator behind a cpu Random (``GetRndEngine``)."""
        self._cpu_only("get_rnd_engine")
        return self._gen

    def set_stream(self, stream):
        """Where a gpu Random queues its samplers (None: each tensor's own stream); CPU
        sampling is synchronous, so a cpu Random keeps it for code ported from C++."""
        from .device import Stream
        if stream is not None and (not isinstance(stream, Stream) or
                                   stream.device is not self.device):
            raise DeviceError(f"Random.set_stream: a {self.device.name} Random takes a "
                              f"Stream({self.device.name}) or None, got {stream!r}")
        self._stream = stream

    def _gpu_fill(self, t, dist, a, b):
        """The GPU's samplers: Philox4x32-10, counter-based (cuda/lower.py emit_random), the
        stream of the seed continued from the counters used before."""
        from ._core import Tensor
        from .cuda import executor
        where = "Random.get_rand_int" if dist == "bits" else f"Random.sample_{dist}"
        if not isinstance(t, Tensor):
            raise TypeError(f"{where}: a gpu Random fills gpu tensors, got {type(t).__name__}")
        check_devices(where, self.device, (t.device,), gpu_ok=True)
        if dist == "bits":
            if t.dtype not in (np.int32, np.int64):
                raise DTypeError(f"GetRandInt: the draws are 32-bit unsigned integers, so the "
                                 f"tensor must hold int32 or int64, got {t.dtype}")
        elif t.dtype != self.dtype:
            raise DTypeError(f"Random(dtype={self.dtype}) cannot fill a {t.dtype} tensor")
        elif self.dtype.kind != "f" or self.dtype.itemsize < 4:
            raise DeviceError(f"{where}: on the GPU, Random draws float32 and float64, not "
                              f"{self.dtype} (sample on the cpu and ms.copy)")
        if t.readonly:
            raise ValueError("Random: the tensor to fill is read-only")
        self._counter += executor.fill_random(t, dist, a, b, self._seed, self._counter,
                                              self._stream or t.stream)
        return t

    def _cpu_only(self, where):
        if self.device is not cpu:
            raise DeviceError(f"Random.{where}: a gpu Random samples uniform and gaussian and "
                              f"fills a tensor with raw draws (get_rand_int(dst)); sample on a "
                              f"cpu Random and ms.copy for the rest")

    # ---- samplers -----------------------------------------------------------------
    def _fill(self, t, draw, real_only=False):
        """Write ``draw(shape)`` into ``t`` through a numpy view, so the pitch is honoured."""
        from ._core import from_numpy
        t = from_numpy(t)   # a Tensor passes through; a numpy array becomes a view
        if t.dtype != self.dtype:
            raise DTypeError(f"Random(dtype={self.dtype}) cannot fill a {t.dtype} tensor")
        if real_only and self.dtype not in FLOAT_DTYPES:
            raise DTypeError("This operation only support floating point types")
        check_devices("Random", t.device)
        if t.readonly:
            raise ValueError("Random: the tensor to fill is read-only")
        a = t.numpy()
        a[...] = draw(a.shape)
        return t

    def sample_uniform(self, t, a=0, b=1):
        """Uniform on [a, b) for floating types, on the integers [a, b] for integer types."""
        if a > b:
            raise ValueError(f"sample_uniform: expected a <= b, got a={a}, b={b}")
        if self.device is not cpu:
            return self._gpu_fill(t, "uniform", a, b)
        if self.dtype.kind in "iu":
            return self._fill(t, lambda s: self._gen.integers(a, b, s, self.dtype, endpoint=True))

        def draw(shape):
            x = self._gen.uniform(a, b, shape).astype(self.dtype)
            # rounding to a narrower dtype can reach b; keep the interval half-open
            if a < b:
                top = np.nextafter(self.dtype.type(b), self.dtype.type(a))
                np.minimum(x, top, out=x)
            return x
        return self._fill(t, draw)

    def sample_gaussian(self, t, mu=0, sigma=1):
        """Normal(mu, sigma); ``sigma <= 0`` fills with ``mu``, as mshadow does."""
        if self.device is not cpu:
            return self._gpu_fill(t, "gaussian", mu, max(sigma, 0))
        if sigma <= 0:
            return self._fill(t, lambda s: mu, real_only=True)
        return self._fill(t, lambda s: self._gen.normal(mu, sigma, s), real_only=True)

    def sample_gamma(self, t, alpha=1, beta=1):
        """Gamma with shape ``alpha`` and scale ``beta``."""
        self._cpu_only("sample_gamma")
        return self._fill(t, lambda s: self._gen.gamma(alpha, beta, s), real_only=True)

    def sample_exponential(self, t, lambda_=1):
        """Exponential with rate ``lambda_`` (> 0)."""
        self._cpu_only("sample_exponential")
        if not lambda_ > 0:
            raise ValueError(f"sample_exponential: expected lambda_ > 0, got {lambda_}")
        return self._fill(t, lambda s: self._gen.exponential(1.0 / lambda_, s), real_only=True)

    def sample_poisson(self, t, lambda_=1):
        """Fill ``t`` with Poisson(``lambda_``) draws (``SamplePoisson``)."""
        self._cpu_only("sample_poisson")
        return self._fill(t, lambda s: self._gen.poisson(lambda_, s))

    def sample_negative_binomial(self, t, k=1, p=1):
        """Failures before the ``k``-th success, each trial succeeding with probability ``p``."""
        self._cpu_only("sample_negative_binomial")
        return self._fill(t, lambda s: self._gen.negative_binomial(k, p, s))

    def sample_generalized_negative_binomial(self, t, mu=1, alpha=1):
        """Mean ``mu``, dispersion ``alpha``: Poisson(mu) if alpha == 0, else
        Poisson(Gamma(1/alpha, mu*alpha))."""
        self._cpu_only("sample_generalized_negative_binomial")
        if alpha == 0:
            return self.sample_poisson(t, mu)
        return self._fill(t, lambda s: self._gen.poisson(self._gen.gamma(1.0 / alpha, mu * alpha, s)))

    # ---- expressions over the internal buffer ---------------------------------------
    def _buffer_view(self, shape):
        """A tensor of ``shape`` over the internal buffer, grown when too small."""
        from ._core import from_numpy, new_tensor
        shape = as_shape(shape)
        if self.device is not cpu:      # a gpu buffer: a new one for another shape
            if self._buffer is None or tuple(self._buffer.shape) != tuple(shape):
                self._buffer = new_tensor(shape, None, dtype=self.dtype, device=self.device)
            return self._buffer
        n = shape.size()
        if self._buffer is None or self._buffer.size < n:
            # a new array, not a resize: views handed out earlier keep the old one alive
            self._buffer = np.empty(n, self.dtype)
        return from_numpy(self._buffer[:n].reshape(shape))

    def gaussian(self, shape, mu=0, sigma=1):
        """Normal samples of ``shape`` as a tensor over the internal buffer.

        Valid only until the next ``gaussian``/``uniform`` call, which overwrites it, as in
        mshadow: ``rnd.gaussian(s) * rnd.gaussian(s)`` multiplies a buffer by itself.
        Copy it (or assign it to a tensor) to keep it.
        """
        return self.sample_gaussian(self._buffer_view(shape), mu, sigma)

    def uniform(self, shape, a=0, b=1):
        """Uniform samples of ``shape`` over the internal buffer; valid until the next call."""
        return self.sample_uniform(self._buffer_view(shape), a, b)

    # C++ spellings
    Seed = seed
    GetSeed = get_seed
    GetRandInt = get_rand_int
    GetRndEngine = get_rnd_engine
    SampleUniform = sample_uniform
    SampleGaussian = sample_gaussian
    SampleGamma = sample_gamma
    SampleExponential = sample_exponential
    SamplePoisson = sample_poisson
    SampleNegativeBinomial = sample_negative_binomial
    SampleGeneralizedNegativeBinomial = sample_generalized_negative_binomial
