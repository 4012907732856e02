"""mshadow.ps: mshadow-ps's parameter-server interface, in one process or across MPI ranks.

``create_shared_model("local")`` shares keys between devices (threads) of one process;
``create_shared_model("mpi")`` shares them between the ranks of an MPI job (mpi4py), each rank
with its own local devices. Both run the same rounds: every device pushes a key once, the
pushes are summed in a fixed order (devices by devid, then ranks by rank), the key's owner
applies the updater to its shard, and every rank receives the new value, which ``pull_req``
copies into the caller's tensor. See docs/ps.md.

The "mpi" backend imports mpi4py when it is created, never when mshadow is imported.
"""
import itertools
import threading
import time

import numpy as np

from .device import cpu
from .dtypes import as_dtype
from .errors import DeviceError, DTypeError, MShadowError, ParamError, PSError, ShapeError

__all__ = ["create_shared_model", "ISharedModel", "IModelUpdater", "SumUpdater", "SGDUpdater",
           "PSError", "CreateSharedModel"]

# Buffers that an MPI request may still write into after a failure: never freed.
_LEAKED = []


# ---- updaters ---------------------------------------------------------------------------
class IModelUpdater:
    """Server-side update of the shard of a key this rank owns (mshadow-ps ``IModelUpdater``).

    ``init_model(key, weight)`` sees the initial value once; ``update(key, grad, weight)``
    gets the summed gradient of a round and must leave the new value in ``weight``. Both
    receive 1-D contiguous mshadow Tensors (a whole key, or this rank's slice of a big key).
    """

    def init_model(self, key, weight):
        pass

    def update(self, key, grad, weight):
        raise NotImplementedError("IModelUpdater.update(key, grad, weight) must be defined")

    def InitModel(self, key, weight):  # noqa: N802  mshadow spelling
        return self.init_model(key, weight)

    def Update(self, key, grad, weight):  # noqa: N802
        return self.update(key, grad, weight)


class SumUpdater(IModelUpdater):
    """The default: the key's value becomes the sum of the round's pushes (mshadow-ps kSum)."""

    def update(self, key, grad, weight):
        np.copyto(np.asarray(weight), np.asarray(grad))


class SGDUpdater(IModelUpdater):
    """``w -= lr * (sum(g) + wd * w)`` on the owner; the pushes are the gradients."""

    def __init__(self, lr, wd=0.0):
        self.lr = float(lr)
        self.wd = float(wd)

    def init_model(self, key, weight):
        if weight.dtype.kind != "f":
            raise DTypeError(f"SGDUpdater needs a floating-point key, key {key} is {weight.dtype}")

    def update(self, key, grad, weight):
        if self.wd:
            weight[:] = weight - self.lr * (grad + self.wd * weight)
        else:
            weight -= self.lr * grad


# ---- internal state -----------------------------------------------------------------------
class _Key:
    def __init__(self, key, shape, dtype, counts, rank):
        self.key = key
        self.shape = shape
        self.dtype = dtype
        self.n = int(np.prod(shape, dtype=np.int64))
        self.counts = counts                                # elements each rank serves
        self.offsets = [int(x) for x in np.cumsum([0] + counts[:-1])]
        self.mine = counts[rank]
        self.replica = np.zeros(self.n, dtype)              # this rank's copy: what pulls read
        self.replica_next = np.zeros(self.n, dtype)         # receives the next round whole
        self.weight = np.zeros(self.mine, dtype)            # the shard this rank serves
        self.bufs = {}
        self.pushes = {}                                    # devid index -> 1-D array
        self.push_round = {}                                # devid index -> round it joined
        self.nstarted = 0                                   # rounds collected
        self.ncompleted = 0                                 # rounds whose value is in replica
        self.busy = False
        self.pulls = {}
        self.comm = None

    def buf(self, name, n):
        b = self.bufs.get(name)
        if b is None or b.size != n:
            b = self.bufs[name] = np.empty(n, self.dtype)
        return b


class _Round:
    __slots__ = ("ks", "index", "data", "priority", "seq", "stage", "req", "t0", "parts")

    def __init__(self, ks, index, data, priority, seq):
        self.ks, self.index, self.data, self.priority, self.seq = ks, index, data, priority, seq
        self.stage = 0
        self.req = None
        self.t0 = 0.0
        self.parts = None


class _Pull:
    __slots__ = ("dest", "callback", "target", "done", "error")

    def __init__(self, dest, callback, target):
        self.dest, self.callback, self.target = dest, callback, target
        self.done = False
        self.error = None


class _LocalTransport:
    """One process: the reduce and the gather are local copies."""
    name = "local"
    rank = 0
    size = 1

    def setup_key(self, model, ks, init, sig):
        if init is not None:
            np.copyto(ks.replica, init)

    def post_reduce(self, model, rnd, local):
        rnd.parts = [local]

    def post_gather(self, model, rnd):
        np.copyto(rnd.ks.replica_next, rnd.ks.weight)

    def test(self, req):
        return True

    def close(self, model):
        pass


# ---- the shared model --------------------------------------------------------------------
class ISharedModel:
    """mshadow-ps ``ISharedModel``: ``init_key``, ``push``, ``pull_req``, ``pull_wait``.

    Make one with ``create_shared_model``. Every method may be called from any thread; the
    pushes of a key from the ``ndev`` devices make one round, and a pull after a push waits
    for that round. A pushed tensor is read asynchronously: do not write it until the
    ``pull_wait`` (or the callback) of that key and device.
    """

    _PARAMS = ("bigarray_bound", "timeout", "update_on_server", "spin")
    # mshadow-ps "local" knobs that have no meaning here; accepted so ported code runs.
    _IGNORED = ("reduce_thread", "use_pin_memory", "pull_thread", "push_thread",
                "test_on_server", "pull_thread_num")

    def __init__(self, transport, devices=(0,), updater=None, **params):
        self._t = transport
        self._updater = updater if updater is not None else SumUpdater()
        self._sum = SumUpdater()
        self.bigarray_bound = 1000 * 1000      # elements; mshadow-ps's default
        self.timeout = 60.0                    # seconds without an answer before PSError
        self.update_on_server = True
        self.spin = 0.002                      # seconds of busy polling, plus 10 ms a MB
        for k, v in params.items():
            self.set_param(k, v)
        self._cv = threading.Condition()
        self._keys = {}
        self._load = [0] * transport.size
        self._ready = []
        self._active = []
        self._calls = []
        self._seq = itertools.count()
        self._error = None
        self._closing = False
        self._closed = False
        self.init(devices)
        self._thread = threading.Thread(target=self._loop, name="mshadow-ps", daemon=True)
        self._thread.start()

    # -- parameters --------------------------------------------------------------------
    @property
    def rank(self):
        return self._t.rank

    @property
    def size(self):
        return self._t.size

    @property
    def backend(self):
        return self._t.name

    def set_param(self, name, value):
        """mshadow-ps ``SetParam``: bigarray_bound (elements; larger keys are split over
        all ranks), timeout (seconds), update_on_server, spin
        (seconds the server thread polls MPI without pause before it starts to sleep; a
        round of B bytes adds B / 1e8 s)."""
        name = str(name)
        if name == "bigarray_bound":
            v = int(value)
            if v < 1:
                raise ParamError(f"bigarray_bound must be >= 1, got {value!r}", name, value)
            self.bigarray_bound = v
        elif name == "timeout":
            v = float(value)
            if not v > 0:
                raise ParamError(f"timeout must be > 0 seconds, got {value!r}", name, value)
            self.timeout = v
        elif name == "spin":
            v = float(value)
            if not v >= 0:
                raise ParamError(f"spin must be >= 0 seconds, got {value!r}", name, value)
            self.spin = v
        elif name == "update_on_server":
            self.update_on_server = str(value) not in ("0", "False", "false")
        elif name.startswith("push_op"):
            if str(value) != "sum":
                raise ParamError(f"only push_op=sum is supported, got {value!r}", name, value)
        elif name not in self._IGNORED:
            raise ParamError(f"unknown parameter {name!r} (known: "
                             f"{', '.join(self._PARAMS + ('push_op',) + self._IGNORED)})",
                             name, value)

    def init(self, devices):
        """mshadow-ps ``Init(devices)``: the devids that push (one round needs each once)."""
        devices = [int(d) for d in devices]
        if not devices or len(set(devices)) != len(devices):
            raise ValueError(f"devices must be distinct device ids, got {devices!r}")
        if getattr(self, "_keys", None):
            raise MShadowError("init(devices) must come before the first init_key")
        self._devs = {d: i for i, d in enumerate(devices)}
        self.devices = tuple(devices)

    # -- keys --------------------------------------------------------------------------
    def init_key(self, key, shape, dtype=np.float32, init=None):
        """Declare ``key`` (int) with ``shape`` and ``dtype``; on "mpi" every rank calls it,
        in the same order. ``init`` (rank 0's is used) sets the starting value, else zeros."""
        self._check()
        if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
            raise TypeError(f"key must be an int, got {type(key).__name__}")
        key = int(key)
        shape = tuple(int(s) for s in (shape if hasattr(shape, "__len__") else (shape,)))
        if not shape or any(s < 0 for s in shape):
            raise ShapeError(f"key {key}: shape must have at least one dimension, all >= 0, "
                             f"got {shape}")
        dtype = as_dtype(dtype)
        if key in self._keys:
            raise MShadowError(f"key {key} is already initialised")
        src = None
        if init is not None:
            src = self._read(init, shape, dtype, f"init of key {key}")
        n = int(np.prod(shape, dtype=np.int64))
        size = self._t.size
        if n >= self.bigarray_bound and size > 1:
            counts = [n // size + (r < n % size) for r in range(size)]
        else:
            owner = min(range(size), key=lambda r: (self._load[r], r))
            counts = [n if r == owner else 0 for r in range(size)]
        ks = _Key(key, shape, dtype, counts, self._t.rank)
        sig = repr((key, shape, dtype.str, counts, init is not None))
        self._call(lambda: self._setup_key(ks, src, sig))
        for r in range(size):
            self._load[r] += counts[r] * dtype.itemsize
        with self._cv:
            self._keys[key] = ks

    def _setup_key(self, ks, src, sig):
        self._t.setup_key(self, ks, src, sig)
        np.copyto(ks.weight, ks.replica[ks.offsets[self.rank]:][:ks.mine])
        if ks.mine:
            self._updater.init_model(ks.key, self._tensor(ks.weight))

    def set_weight(self, tensor, key):
        """mshadow-ps ``SetWeight_``: this rank's copy and served shard of ``key`` become
        ``tensor`` (give every rank the same value). No round of the key may be in flight."""
        ks = self._key(key)
        src = self._read(tensor, ks.shape, ks.dtype, f"set_weight of key {key}")
        with self._cv:
            if ks.busy or ks.pushes or ks.nstarted != ks.ncompleted:
                raise MShadowError(f"set_weight: key {key} has a round in flight")
            np.copyto(ks.replica, src)
            np.copyto(ks.weight, ks.replica[ks.offsets[self.rank]:][:ks.mine])

    def check_weight(self, tensor, key):
        """mshadow-ps ``CheckWeight``: raise if ``tensor`` differs from this rank's copy."""
        ks = self._key(key)
        src = self._read(tensor, ks.shape, ks.dtype, f"check_weight of key {key}")
        with self._cv:
            same = np.array_equal(src, ks.replica, equal_nan=ks.dtype.kind == "f")
        if not same:
            raise MShadowError(f"check_weight: the tensor differs from the model's key {key}")

    # -- push and pull -----------------------------------------------------------------
    def push(self, tensor, key, priority=0, *, devid=0):
        """Add ``tensor`` to this round of ``key`` (sum over devices and ranks); returns at
        once. The round starts when every device of every rank has pushed the key."""
        self._check()
        ks = self._key(key)
        dev = self._dev(devid)
        data = self._read(tensor, ks.shape, ks.dtype, f"push of key {key}")
        with self._cv:
            self._check()
            if dev in ks.pushes:
                raise MShadowError(f"device {devid} pushed key {key} twice before the other "
                                   f"devices pushed it once (a round takes one push from each "
                                   f"of devices {list(self.devices)})")
            ks.pushes[dev] = (data, priority)
            ks.push_round[dev] = ks.nstarted + 1
            if len(ks.pushes) == len(self._devs):
                ks.nstarted += 1
                order = [ks.pushes[i] for i in range(len(self._devs))]
                rnd = _Round(ks, ks.nstarted, [d for d, _ in order], max(p for _, p in order),
                             next(self._seq))
                ks.pushes = {}
                self._ready.append(rnd)
                self._cv.notify_all()

    def pull_req(self, tensor, key, callback=None, priority=0, *, devid=0):
        """Ask for ``key`` into ``tensor``: the value after the round this device last pushed
        into (or the current value). Returns at once; ``callback()`` runs exactly once when
        the tensor holds the value, on the server thread (or here if it is already there)."""
        self._check()
        ks = self._key(key)
        dev = self._dev(devid)
        dest = self._dest(tensor, ks)
        with self._cv:
            self._check()
            old = ks.pulls.get(dev)
            if old is not None and not old.done:
                raise MShadowError(f"device {devid} already has a pull of key {key} pending; "
                                   f"call pull_wait first")
            p = _Pull(dest, callback, ks.push_round.get(dev, 0))
            ks.pulls[dev] = p
            ready = p.target <= ks.ncompleted
            if ready:
                np.copyto(dest, ks.replica.reshape(ks.shape))
        if ready:
            self._complete([p])

    def pull_wait(self, key, *, devid=0):
        """Wait for the pull of ``key`` by ``devid`` (its data and callback); re-raises the
        callback's exception; raises PSError if a peer failed."""
        ks = self._key(key)
        dev = self._dev(devid)
        with self._cv:
            p = ks.pulls.get(dev)
            if p is None:
                self._check()
                return
            while not p.done:
                self._check()
                self._cv.wait(0.05)
            ks.pulls.pop(dev, None)
        if p.error is not None:
            raise p.error

    def wait_all(self):
        """Wait until no round is queued or in flight (pushes still waiting for other devices
        do not count)."""
        with self._cv:
            while self._ready or self._active or self._calls:
                self._check()
                self._cv.wait(0.05)
            self._check()

    def close(self):
        """Finish the rounds in flight and stop the server thread (and free MPI resources)."""
        if self._closed:
            return
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join()
        self._closed = True
        if self._error is None:
            self._t.close(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- helpers -------------------------------------------------------------------------
    def _check(self):
        if self._error is not None:
            raise self._error
        if self._closing:
            raise MShadowError("the shared model is closed")

    def _key(self, key):
        try:
            return self._keys[int(key)]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"key {key!r} was not initialised with init_key") from None

    def _dev(self, devid):
        try:
            return self._devs[int(devid)]
        except (KeyError, TypeError, ValueError):
            raise DeviceError(f"devid {devid!r} is not one of the model's devices "
                              f"{list(self.devices)}") from None

    @staticmethod
    def _tensor(a):
        from ._core import from_numpy
        return from_numpy(a)

    @staticmethod
    def _array(tensor, what):
        if isinstance(tensor, np.ndarray):
            return tensor
        if getattr(tensor, "device", cpu) != cpu:
            raise DeviceError(f"{what}: mshadow.ps moves cpu tensors, got {tensor.device}")
        return np.asarray(tensor)

    def _read(self, tensor, shape, dtype, what):
        """A flat contiguous array of ``tensor``'s values: a zero-copy view when its rows are
        not padded, else a staged copy."""
        a = self._array(tensor, what)
        if a.shape != shape:
            raise ShapeError(f"{what}: shape {a.shape} does not match the key's {shape}")
        if a.dtype != dtype:
            raise DTypeError(f"{what}: dtype {a.dtype} does not match the key's {dtype}")
        return a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)

    def _dest(self, tensor, ks):
        a = self._array(tensor, f"pull of key {ks.key}")
        if a.shape != ks.shape:
            raise ShapeError(f"pull of key {ks.key}: shape {a.shape} does not match the "
                             f"key's {ks.shape}")
        if a.dtype != ks.dtype:
            raise DTypeError(f"pull of key {ks.key}: dtype {a.dtype} does not match the "
                             f"key's {ks.dtype}")
        if not a.flags.writeable:
            raise ValueError(f"pull of key {ks.key}: the destination is read-only")
        return a

    def _complete(self, pulls):
        for p in pulls:
            if p.callback is not None:
                try:
                    p.callback()
                except BaseException as e:  # noqa: BLE001  handed to pull_wait
                    p.error = e
        with self._cv:
            for p in pulls:
                p.done = True
                p.dest = None          # unpin the tensor's memory
            self._cv.notify_all()

    def _call(self, fn):
        """Run ``fn`` on the server thread (it owns every MPI call) and wait for it."""
        box = {}
        with self._cv:
            self._check()
            self._calls.append((fn, box))
            self._cv.notify_all()
            while "done" not in box:
                self._check()
                self._cv.wait(0.05)
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def _fail(self, exc):
        with self._cv:
            if self._error is None:
                if not isinstance(exc, PSError):
                    err = PSError(f"rank {self.rank} of {self.size}: the mshadow.ps server "
                                  f"thread failed: {exc!r}")
                    err.__cause__ = exc
                    exc = err
                self._error = exc
                _LEAKED.append((self._active, self._ready, self._keys))
            self._cv.notify_all()

    # -- the server thread --------------------------------------------------------------
    def _loop(self):
        idle_since = None
        try:
            while True:
                with self._cv:
                    while not (self._calls or self._ready or self._active or self._closing):
                        self._cv.wait()
                    if self._closing and not (self._calls or self._ready or self._active):
                        return
                    calls, self._calls = self._calls, []
                    start = []
                    for rnd in sorted(self._ready, key=lambda r: (-r.priority, r.seq)):
                        if not rnd.ks.busy:
                            rnd.ks.busy = True
                            start.append(rnd)
                    if start:
                        self._ready = [r for r in self._ready if r not in start]
                for fn, box in calls:
                    try:
                        box["value"] = fn()
                    except PSError as e:
                        box["error"] = e
                        self._fail(e)
                    except Exception as e:  # noqa: BLE001  raised in the caller
                        box["error"] = e
                    with self._cv:
                        box["done"] = True
                        self._cv.notify_all()
                for rnd in start:
                    self._start(rnd)
                    self._active.append(rnd)
                progressed = bool(start or calls)
                now = time.monotonic()
                for rnd in list(self._active):
                    try:
                        finished = self._advance(rnd)
                    except PSError:
                        raise
                    except Exception as e:
                        ks = rnd.ks
                        hint = ("; a rank probably died" if isinstance(e, ConnectionError)
                                or type(e).__module__.startswith("mpi4py") else "")
                        raise PSError(
                            f"rank {self.rank} of {self.size}: round {rnd.index} of key "
                            f"{ks.key} failed ({type(e).__name__}: {e}){hint}. This rank's "
                            f"copy of key {ks.key} is whole at round {ks.ncompleted}") from e
                    if finished:
                        self._active.remove(rnd)
                        self._finish(rnd)
                        progressed = True
                    elif now - rnd.t0 > self.timeout:
                        what = "reduce (push)" if rnd.stage == 1 else "gather (pull)"
                        ks = rnd.ks
                        raise PSError(
                            f"rank {self.rank} of {self.size}: the {what} of key {ks.key} "
                            f"round {rnd.index} got no answer from the other ranks within "
                            f"{self.timeout:g} s; a rank probably died or stopped pushing "
                            f"this key. This rank's copy of key {ks.key} is whole at round "
                            f"{ks.ncompleted}"
                            + (f"; round {rnd.index} was not applied" if rnd.stage == 1 else
                               f" (the slice it serves holds round {rnd.index}, whole)"))
                if self._active and not progressed:
                    # MPI moves data only inside MPI calls: poll without pause for `spin`
                    # seconds (even sleep(0) costs a scheduler round trip, 4x slower
                    # transfers here), then back off so a rank waiting for slow peers
                    # leaves the CPU to the compute.
                    # A big transfer needs the polling all along: the window grows with
                    # the bytes in flight (at 100 MB/s).
                    idle_since = idle_since or now
                    window = self.spin + max(r.ks.n * r.ks.dtype.itemsize
                                             for r in self._active) / 1e8
                    if now - idle_since > window:
                        time.sleep(1e-4)
                else:
                    idle_since = None
        except BaseException as e:  # noqa: BLE001  every caller learns of it
            self._fail(e)

    def _start(self, rnd):
        ks = rnd.ks
        if len(rnd.data) == 1:
            local = rnd.data[0]
        else:                                   # devices summed in devid order
            local = ks.buf("local", ks.n)
            np.copyto(local, rnd.data[0])
            for d in rnd.data[1:]:
                np.add(local, d, out=local)
        rnd.stage = 1
        rnd.t0 = time.monotonic()
        rnd.req = self._t.post_reduce(self, rnd, local)

    def _advance(self, rnd):
        ks = rnd.ks
        if rnd.stage == 1:
            if not self._t.test(rnd.req):
                return False
            # The whole reduced shard is here (scratch); only now is the served value touched.
            if ks.mine:
                parts = rnd.parts
                if len(parts) == 1:
                    total = parts[0]
                else:                           # ranks summed in rank order
                    total = ks.buf("sum", ks.mine)
                    np.copyto(total, parts[0])
                    for part in parts[1:]:
                        np.add(total, part, out=total)
                upd = self._updater if self.update_on_server else self._sum
                upd.update(ks.key, self._tensor(total), self._tensor(ks.weight))
            rnd.stage = 2
            rnd.t0 = time.monotonic()
            rnd.req = self._t.post_gather(self, rnd)
        if not self._t.test(rnd.req):
            return False
        rnd.data = rnd.parts = rnd.req = None
        return True

    def _finish(self, rnd):
        ks = rnd.ks
        with self._cv:
            ks.replica, ks.replica_next = ks.replica_next, ks.replica
            ks.ncompleted = rnd.index
            ks.busy = False
            done = []
            for p in ks.pulls.values():
                if not p.done and p.dest is not None and p.target <= ks.ncompleted:
                    np.copyto(p.dest, ks.replica.reshape(ks.shape))
                    done.append(p)
            self._cv.notify_all()
        if done:
            self._complete(done)

    # -- C++ spellings ----------------------------------------------------------------
    def SetParam(self, name, value):  # noqa: N802
        return self.set_param(name, value)

    def Init(self, devices):  # noqa: N802
        return self.init(devices)

    def InitKey(self, shape, key, devid=0, dtype=np.float32):  # noqa: N802
        return self.init_key(key, shape, dtype)

    def Push(self, tensor, key, devid=0, priority=0):  # noqa: N802
        return self.push(tensor, key, priority, devid=devid)

    def PullReq(self, tensor, key, devid=0, priority=0, callback=None):  # noqa: N802
        return self.pull_req(tensor, key, callback, priority, devid=devid)

    def PullWait(self, key, devid=0):  # noqa: N802
        return self.pull_wait(key, devid=devid)

    def SetWeight_(self, tensor, key, devid=0):  # noqa: N802
        return self.set_weight(tensor, key)

    def CheckWeight(self, tensor, key, devid=0):  # noqa: N802
        return self.check_weight(tensor, key)


def create_shared_model(type_name="local", *, devices=(0,), updater=None, comm=None, **params):
    """mshadow-ps ``CreateSharedModel``: ``"local"`` (devices of this process) or ``"mpi"``
    (ranks of ``comm``, default MPI.COMM_WORLD; ``"dist"`` is an alias). ``updater`` is an
    IModelUpdater run where a key is served (default: SumUpdater); ``params`` go to
    set_param (bigarray_bound, timeout, spin)."""
    if type_name == "local":
        if comm is not None:
            raise ValueError('comm= only applies to the "mpi" shared model')
        transport = _LocalTransport()
    elif type_name in ("mpi", "dist"):
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            raise ImportError('the "mpi" shared model needs mpi4py: pip install "mshadow[dist]" '
                              '(or: pip install mpi4py mpich)') from None
        from ._ps_mpi import MPITransport   # imports mpi4py.MPI, which initialises MPI
        transport = MPITransport(comm)
    else:
        raise ValueError(f'unknown shared model type {type_name!r} (expected "local" or "mpi")')
    model = ISharedModel(transport, devices=devices, updater=updater, **params)
    if type_name != "local":
        from ._ps_mpi import register
        register(model)
    return model


CreateSharedModel = create_shared_model
