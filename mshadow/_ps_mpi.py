"""The "mpi" transport of mshadow.ps: nonblocking MPI point-to-point, a communicator a key.

A round of a key is two steps on the key's own communicator (so rounds of different keys may
start in any order on different ranks without their messages mixing):
  reduce  every rank Isends each owner its slice of the pushed sum; the owner Irecvs one part
          from every rank into scratch and, once all have arrived, sums them in rank order.
  gather  each owner Isends its updated slice to every rank, which Irecvs it into scratch.
Only the server thread calls MPI, polling the requests with MPI_Testall against the timeout.
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
# Data moves as a basic type of the same size, so no derived type is ever packed; float16
# (no MPI type) moves as 16-bit integers. mshadow.ps sums, MPI only moves bytes.
_MOVE_TYPES = {"f4": MPI.FLOAT, "f8": MPI.DOUBLE, "i4": MPI.INT32_T, "i8": MPI.INT64_T,
               "i1": MPI.INT8_T, "u1": MPI.UINT8_T, "f2": MPI.UINT16_T}


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
        # Point to point, not Ialltoallv: MPICH completed an Ialltoallv whose peer had died,
        # with that peer's part simply missing; a receive completes only with its message.
        ks = rnd.ks
        t = _move_type(ks.dtype)
        m, me, tag = ks.mine, self.rank, rnd.index % 2 ** 15
        reqs = []
        parts = [None] * self.size
        if m:
            recv = ks.buf("recv", m * self.size)
            for r in range(self.size):
                if r == me:
                    parts[r] = local[ks.offsets[me]:ks.offsets[me] + m]
                else:
                    parts[r] = recv[r * m:(r + 1) * m]
                    reqs.append(ks.comm.Irecv([parts[r], m, t], r, tag))
        for r in range(self.size):
            if r != me and ks.counts[r]:
                reqs.append(ks.comm.Isend([local[ks.offsets[r]:ks.offsets[r] + ks.counts[r]],
                                           ks.counts[r], t], r, tag))
        rnd.parts = parts
        return reqs, [MPI.Status() for _ in reqs]

    def post_gather(self, model, rnd):
        ks = rnd.ks
        t = _move_type(ks.dtype)
        me, tag = self.rank, rnd.index % 2 ** 15
        reqs = []
        for r in range(self.size):
            c, o = ks.counts[r], ks.offsets[r]
            if not c:
                continue
            if r == me:
                np.copyto(ks.replica_next[o:o + c], ks.weight)
                reqs.extend(ks.comm.Isend([ks.weight, c, t], q, tag)
                            for q in range(self.size) if q != me)
            else:
                reqs.append(ks.comm.Irecv([ks.replica_next[o:o + c], c, t], r, tag))
        return reqs, [MPI.Status() for _ in reqs]

    def test(self, handle):
        reqs, statuses = handle
        try:
            return MPI.Request.Testall(reqs, statuses)
        except MPI.Exception as e:
            bad = sorted({(st.Get_source(), _short(MPI.Get_error_string(st.Get_error())))
                          for st in statuses
                          if st.Get_error() not in (MPI.SUCCESS, MPI.ERR_PENDING)})
            what = "; ".join(f"rank {src}: {msg}" for src, msg in bad) or str(e)
            raise ConnectionError(f"MPI reported {what}") from e

    def close(self, model):
        for ks in model._keys.values():
            if ks.comm is not None:
                ks.comm.Free()
                ks.comm = None


def _short(message):
    """MPICH's error class and the innermost cause, without the stack in between."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) < 2:
        return message.strip()
    return f"{lines[0].split(',')[0]}: {lines[-1].split(':', 1)[-1].strip()}"


def register(model):
    _MODELS.add(model)


@atexit.register
def _at_exit():
    # Registered after mpi4py's own finaliser, so it runs first. MPI_Finalize could wait
    # forever on a request a dead rank will never answer: a failed job exits here instead.
    models = list(_MODELS)
    for m in models:
        if m._error is None:
            try:
                m.close()           # finishes the rounds in flight, or fails within the timeout
            except Exception as e:  # noqa: BLE001  exiting anyway
                print(f"mshadow.ps: closing the shared model at exit failed: {e!r}",
                      file=sys.stderr)
            if m._error is not None:
                print(f"mshadow.ps: at exit: {m._error}", file=sys.stderr)
    if any(m._error is not None for m in models):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
