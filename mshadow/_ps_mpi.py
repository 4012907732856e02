"""The "mpi" transport of mshadow.ps: nonblocking MPI collectives, one communicator a key.

A round of a key is two collectives on the key's own communicator (so rounds of different keys
may start in any order on different ranks without mismatching):
  reduce  Ialltoallv: each rank sends every owner its slice; the owner sums the slices in rank
          order ("ordered", bit-reproducible) -- or Ireduce_scatter with MPI_SUM ("mpi").
  gather  Iallgatherv: the owners' updated slices reach every rank's scratch copy.
Only the server thread calls MPI, polling requests with MPI_Test against the timeout.
Imported only by create_shared_model("mpi"): importing mshadow never loads mpi4py.
"""
import atexit
import hashlib
import os
import sys
import time
import weakref

import numpy as np
from mpi4py import MPI

from .errors import MShadowError, PSError

_MODELS = weakref.WeakSet()
_SUM_TYPES = {"f4": MPI.FLOAT, "f8": MPI.DOUBLE, "i4": MPI.INT32_T, "i8": MPI.INT64_T,
              "i1": MPI.INT8_T, "u1": MPI.UINT8_T}
# Data moves as a basic type of the same size, so no derived type is ever packed; float16
# (no MPI type) moves as 16-bit integers and is summed by the "ordered" reduce only.
_MOVE_TYPES = dict(_SUM_TYPES, f2=MPI.UINT16_T)


def _move_type(dtype):
    return _MOVE_TYPES[dtype.str[1:]]


class MPITransport:
    name = "mpi"

    def __init__(self, comm=None):
        if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
            raise PSError("mshadow.ps needs MPI initialised with at least MPI_THREAD_SERIALIZED "
                          "(its server thread makes the MPI calls); mpi4py asks for "
                          "MPI_THREAD_MULTIPLE unless mpi4py.rc.thread_level was changed")
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def _wait(self, model, req, what):
        t0 = time.monotonic()
        while not req.Test():
            if time.monotonic() - t0 > model.timeout:
                raise PSError(f"rank {self.rank} of {self.size}: {what} got no answer from the "
                              f"other ranks within {model.timeout:g} s; a rank probably died or "
                              f"did not make the same call")
            time.sleep(1e-4)

    def setup_key(self, model, ks, init, sig):
        # Every rank must declare the same key the same way, in the same order.
        mine = np.frombuffer(hashlib.sha256(sig.encode()).digest(), np.uint8)
        every = np.empty((self.size, mine.size), np.uint8)
        self._wait(model, self.comm.Iallgather(mine, every), f"init_key({ks.key})")
        bad = [r for r in range(self.size) if not np.array_equal(every[r], mine)]
        if bad:
            raise MShadowError(f"init_key({ks.key}) on rank {self.rank} does not match ranks "
                               f"{bad}: every rank must call init_key with the same key, shape, "
                               f"dtype, init given or not, and bigarray_bound, in the same order "
                               f"(this rank: key, shape, dtype, counts, init = {sig})")
        comm, req = self.comm.Idup()
        self._wait(model, req, f"init_key({ks.key}) (communicator)")
        ks.comm = comm
        if init is not None:
            np.copyto(ks.replica, init)
            self._wait(model, comm.Ibcast([ks.replica, ks.n, _move_type(ks.dtype)],
                                          root=0), f"init_key({ks.key}) (initial value)")

    def post_reduce(self, model, rnd, local):
        ks = rnd.ks
        code = ks.dtype.str[1:]
        if model.reduce == "mpi" and code in _SUM_TYPES:
            total = ks.buf("sum", ks.mine)
            rnd.parts = [total]
            t = _SUM_TYPES[code]
            return ks.comm.Ireduce_scatter([local, t], [total, t], ks.counts, MPI.SUM)
        t = _move_type(ks.dtype)
        m = ks.mine
        recv = ks.buf("recv", m * self.size)
        rnd.parts = [recv[r * m:(r + 1) * m] for r in range(self.size)]
        return ks.comm.Ialltoallv([local, (ks.counts, ks.offsets), t],
                                  [recv, ([m] * self.size, [r * m for r in range(self.size)]), t])

    def post_gather(self, model, rnd):
        ks = rnd.ks
        t = _move_type(ks.dtype)
        return ks.comm.Iallgatherv([ks.weight, ks.mine, t],
                                   [ks.replica_next, (ks.counts, ks.offsets), t])

    def test(self, req):
        return req.Test()

    def close(self, model):
        for ks in model._keys.values():
            if ks.comm is not None:
                ks.comm.Free()
                ks.comm = None


def register(model):
    _MODELS.add(model)


@atexit.register
def _at_exit():
    # Registered after mpi4py's own finaliser, so it runs first. MPI_Finalize could wait
    # forever on a request a dead rank will never answer: a failed job exits here instead.
    models = list(_MODELS)
    if any(m._error is not None for m in models):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    for m in models:
        try:
            m.close()
        except Exception as e:  # noqa: BLE001  exiting anyway
            print(f"mshadow.ps: closing the shared model at exit failed: {e!r}", file=sys.stderr)
