"""One rank of the mshadow.ps MPI tests; tests/test_ps_mpi.py launches it under mpiexec.

    python tests/ps_mpi_worker.py sums             every rank checks its results, prints "ok"
    python tests/ps_mpi_worker.py fault VICTIM WHEN  rank VICTIM exits mid-push (WHEN=mid) or
                                                    before pushing (WHEN=before) in round 2

Every value any rank pushes is a function of (rank, device, key, round), so each rank builds
the reference sums of all ranks itself, in the order mshadow.ps promises: devices by devid,
then ranks by rank.
"""
import json
import os
import sys
import threading
import time

import numpy as np

try:
    import mshadow as ms  # the one the launching test imported (it sets PYTHONPATH)
except ImportError:       # run by hand from a checkout with an in-place build
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import mshadow as ms  # noqa: E402
from mshadow.ps import PSError  # noqa: E402

KEYS = {  # key: (shape, dtype)
    0: ((3, 5), np.float32),      # pushed and pulled as padded (pitched) tensors
    1: ((40, 33), np.float64),    # >= bigarray_bound: split over every rank, uneven slices
    2: ((17,), np.float16),
    3: ((6, 4), np.int32),
    4: ((9,), np.int8),           # wraps around, like the C++ sum
    5: ((2, 3, 4), np.uint8),
    6: ((11,), np.int64),
    7: ((0,), np.float32),        # empty
}
NDEV = 2


def grad(rank, dev, key, rnd):
    shape, dtype = KEYS[key]
    rng = np.random.default_rng([rank, dev, key, rnd])
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3, shape)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def reference(size, key, rnd):
    total = None
    for r in range(size):
        local = grad(r, 0, key, rnd)
        for d in range(1, NDEV):
            local = local + grad(r, d, key, rnd)
        total = local if total is None else total + local
    return total


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def as_tensor(a, padded):
    if padded:
        t = ms.new_tensor(a.shape, dtype=a.dtype, pad=True)
        assert not t.check_contiguous()
        np.asarray(t)[...] = a
        return t
    return ms.from_numpy(np.ascontiguousarray(a))


def check_sums():
    m = ms.ps.create_shared_model("mpi", devices=range(NDEV), bigarray_bound=500, timeout=30)
    rank, size = m.rank, m.size
    for key, (shape, dtype) in KEYS.items():
        m.init_key(key, shape, dtype)
    assert m._keys[1].counts == [1320 // size + (r < 1320 % size) for r in range(size)]
    calls = {}
    outs = {}

    def device(dev):
        for rnd in range(3):
            for key in sorted(KEYS, reverse=dev == 1):          # devices push in any order
                shape, dtype = KEYS[key]
                m.push(as_tensor(grad(rank, dev, key, rnd), key == 0), key, priority=key, devid=dev)
            for key in KEYS:
                shape, dtype = KEYS[key]
                out = ms.new_tensor(shape, dtype=dtype, pad=key == 0) if shape[0] else \
                    ms.from_numpy(np.empty(shape, dtype))
                outs[dev, key, rnd] = out
                tag = (dev, key, rnd)
                m.pull_req(out, key, lambda tag=tag: calls.__setitem__(tag, calls.get(tag, 0) + 1),
                           priority=-key, devid=dev)
            for key in KEYS:
                m.pull_wait(key, devid=dev)
                assert calls.get((dev, key, rnd)) == 1, "callback before pull_wait returned"

    threads = [threading.Thread(target=device, args=(d,)) for d in range(NDEV)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == NDEV * len(KEYS) * 3 and set(calls.values()) == {1}, calls
    checked = 0
    for (dev, key, rnd), out in outs.items():
        want = reference(size, key, rnd)
        got = np.asarray(out)
        assert np.array_equal(bits(got), bits(want)), (key, rnd, got, want)
        checked += 1
    m.close()
    return checked


def check_sgd():
    # rank 0's init is everyone's starting value; the owner of each slice applies the update
    m = ms.ps.create_shared_model("mpi", updater=ms.ps.SGDUpdater(lr=0.5), bigarray_bound=64)
    rank, size = m.rank, m.size
    w0 = {k: np.random.default_rng(k).standard_normal(n).astype(np.float32)
          for k, n in ((10, 50), (11, 200))}
    for k, w in w0.items():
        m.init_key(k, w.shape, np.float32, init=w + rank)        # only rank 0's counts
    for k, w in w0.items():
        out = ms.new_tensor(w.shape)
        m.pull_req(out, k)
        m.pull_wait(k)
        assert np.array_equal(np.asarray(out), w), "init is rank 0's value"
        want = w.copy()
        for rnd in range(2):
            gs = [np.random.default_rng([q, k, rnd]).standard_normal(w.shape).astype(np.float32)
                  for q in range(size)]
            m.push(gs[rank], k)
            m.pull_req(out, k)
            m.pull_wait(k)
            total = gs[0]
            for g in gs[1:]:
                total = total + g
            want = want - np.float32(0.5) * total
            assert np.array_equal(bits(np.asarray(out)), bits(want)), (k, rnd)
    m.close()


def check_mismatch():
    m = ms.ps.create_shared_model("mpi")
    try:
        m.init_key(99, (m.rank + 1,), np.float32)     # each rank a different shape
    except ms.MShadowError as e:
        assert "does not match ranks" in str(e), e
    else:
        raise AssertionError("a key declared differently on each rank was accepted")
    m.close()


def check_overlap():
    # the server thread finishes a round while the caller computes and never calls mshadow.ps
    m = ms.ps.create_shared_model("mpi", timeout=30)
    m.init_key(0, (1000,), np.float32)
    done = threading.Event()
    out = np.zeros(1000, np.float32)
    m.push(np.full(1000, m.rank + 1.0, np.float32), 0)
    m.pull_req(out, 0, done.set)
    x = ms.new_tensor((200, 200), init=0.5)
    t0 = time.monotonic()
    while not done.is_set() and time.monotonic() - t0 < 20:
        x[:] = ms.F(ms.op.tanh, x) * 0.5            # "compute"
    assert done.is_set(), "the round did not complete while the caller computed"
    assert (out == m.size * (m.size + 1) / 2).all()
    m.pull_wait(0)
    m.close()


def sums():
    checked = check_sums()
    check_sgd()
    check_overlap()
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_size() > 1:
        check_mismatch()
    print(f"rank {MPI.COMM_WORLD.Get_rank()} ok {checked}", flush=True)


def fault(victim, when):
    timeout = 3.0
    m = ms.ps.create_shared_model("mpi", bigarray_bound=1000, timeout=timeout)
    rank, size = m.rank, m.size
    n = 200_000                                              # big: every rank serves a slice
    m.init_key(0, (n,), np.float32)
    out = ms.new_tensor((n,))
    vals = [np.full(n, rank + 1.0 + 10 * rnd, np.float32) for rnd in range(2)]
    m.push(ms.from_numpy(vals[0]), 0)                        # round 1 completes everywhere
    m.pull_req(out, 0)
    m.pull_wait(0)
    r1 = float(sum(q + 1.0 for q in range(size)))
    assert (np.asarray(out) == r1).all()
    r2 = float(sum(q + 11.0 for q in range(size)))
    if rank == victim:
        if when == "mid":
            m.push(ms.from_numpy(vals[1]), 0)                # the sends are posted ...
            time.sleep(0.001)
        os._exit(3)                                          # ... and the rank is gone
    t0 = time.monotonic()
    try:
        m.push(ms.from_numpy(vals[1]), 0)
        m.pull_req(out, 0)
        m.pull_wait(0)
    except PSError as e:
        waited = time.monotonic() - t0
        got = np.asarray(out)
        served = m._keys[0].weight
        report = {"rank": rank, "waited": round(waited, 2), "error": str(e),
                  # the pulled tensor still holds round 1, whole
                  "pulled_whole_r1": bool((got == r1).all()),
                  # the slice this rank serves holds round 1 or round 2, never a mix
                  "served_whole": bool((served == r1).all() or (served == r2).all()),
                  "served_r2": bool(served.size and (served == r2).all()),
                  "served_values": [float(v) for v in np.unique(served)[:6]],
                  "later_calls_raise": False}
        try:
            m.push(ms.from_numpy(vals[1]), 0)
        except PSError:
            report["later_calls_raise"] = True
        print("FAULT " + json.dumps(report), flush=True)
        sys.exit(0)      # mshadow.ps turns this exit into status 1: the job failed
    # The victim served its slice of round 2 before it died (it pushed last, on a loaded
    # machine): this rank's round is whole, a legitimate outcome. Report it and leave
    # without the model's clean shutdown, which waits for every rank (the dead one too)
    got = np.asarray(out)
    print("WHOLE " + json.dumps({"rank": rank, "whole_r2": bool((got == r2).all())}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "sums":
        sums()
    elif sys.argv[1] == "fault":
        fault(int(sys.argv[2]), sys.argv[3])
