"""mshadow.ps in one process: the "local" shared model, devices as threads. No MPI needed."""
import subprocess
import sys
import threading

import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import CHILD_CWD, child_env
from mshadow.errors import (DeviceError, DTypeError, FreedTensorError, MShadowError, ParamError,
                            ShapeError)


@pytest.fixture
def model():
    made = []

    def make(**kw):
        m = ms.ps.create_shared_model("local", **kw)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


def test_core_import_does_not_load_mpi4py():
    code = ("import sys, mshadow as ms; m = ms.ps.create_shared_model('local'); m.close(); "
            "print('mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=CHILD_CWD, env=child_env()).stdout
    assert out.strip() == "False"


def test_devices_summed_in_devid_order_whatever_the_arrival(model):
    # (1e8 + 1) - 1e8 == 0 in float32, but (-1e8 + 1e8) + 1 == 1: the order shows
    m = model(devices=(0, 1, 2))
    m.init_key(5, (4, 3), np.float32)
    vals = {0: 1e8, 1: 1.0, 2: -1e8}
    outs = {d: ms.new_tensor((4, 3), pad=True) for d in vals}
    for d in (2, 0, 1):                              # arrival order differs from devid order
        m.push(ms.new_tensor((4, 3), init=vals[d], pad=True), 5, devid=d)
    for d in vals:
        m.pull_req(outs[d], 5, devid=d)
    for d in vals:
        m.pull_wait(5, devid=d)
        want = (np.float32(1e8) + np.float32(1.0)) + np.float32(-1e8)
        assert want == 0
        np.testing.assert_array_equal(outs[d].numpy(), np.full((4, 3), want, np.float32))


def test_threads_as_devices_rounds_and_callbacks_once(model):
    ndev, rounds = 4, 5
    m = model(devices=range(ndev))
    shapes = {0: ((7, 9), np.float64), 1: ((13,), np.int32), 2: ((3, 2, 5), np.float16)}
    for k, (shape, dt) in shapes.items():
        m.init_key(k, shape, dt)
    calls = {}
    lock = threading.Lock()
    got = {}

    def value(d, k, r):
        shape, dt = shapes[k]
        return np.random.default_rng([d, k, r]).integers(-50, 50, shape).astype(dt)

    def device(d):
        for r in range(rounds):
            for k in shapes:
                m.push(ms.from_numpy(value(d, k, r)), k, devid=d)
            for k, (shape, dt) in shapes.items():
                out = ms.new_tensor(shape, dtype=dt, pad=True)

                def cb(tag=(d, k, r)):
                    with lock:
                        calls[tag] = calls.get(tag, 0) + 1
                m.pull_req(out, k, cb, devid=d)
                got[d, k, r] = out
            for k in shapes:
                m.pull_wait(k, devid=d)

    threads = [threading.Thread(target=device, args=(d,)) for d in range(ndev)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == ndev * len(shapes) * rounds and set(calls.values()) == {1}
    for (d, k, r), out in got.items():
        want = value(0, k, r)
        for dd in range(1, ndev):
            want = want + value(dd, k, r)
        np.testing.assert_array_equal(out.numpy(), want)


def test_padded_tensors_push_and_pull(model):
    m = model()
    m.init_key(1, (5, 3), np.float32)
    src = ms.new_tensor((5, 3), pad=True)
    assert not src.check_contiguous()
    src.numpy()[...] = np.arange(15, dtype=np.float32).reshape(5, 3)
    dst = ms.new_tensor((5, 3), pad=True)
    m.push(src, 1)
    m.pull_req(dst, 1)
    m.pull_wait(1)
    np.testing.assert_array_equal(dst.numpy(), np.arange(15, dtype=np.float32).reshape(5, 3))


def test_sgd_updater_and_init(model):
    w0 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    m = model(updater=ms.ps.SGDUpdater(lr=0.25), devices=(0, 1))
    m.init_key(0, (2, 3), np.float32, init=ms.from_numpy(w0))
    out = ms.new_tensor((2, 3))
    m.pull_req(out, 0)                  # no push yet: the initial value
    m.pull_wait(0)
    np.testing.assert_array_equal(out.numpy(), w0)
    g = [np.full((2, 3), 0.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]
    for d in (0, 1):
        m.push(g[d], 0, devid=d)
    m.pull_req(out, 0)
    m.pull_wait(0)
    np.testing.assert_array_equal(out.numpy(), w0 - np.float32(0.25) * (g[0] + g[1]))


def test_sgd_rejects_integer_keys(model):
    m = model(updater=ms.ps.SGDUpdater(0.1))
    with pytest.raises(DTypeError, match="floating-point"):
        m.init_key(0, (3,), np.int32)


def test_callback_error_reaches_pull_wait_once(model):
    m = model()
    m.init_key(0, (2,), np.float32)
    m.push(np.ones(2, np.float32), 0)

    def bad():
        raise ZeroDivisionError("in callback")
    m.pull_req(np.zeros(2, np.float32), 0, bad)
    with pytest.raises(ZeroDivisionError, match="in callback"):
        m.pull_wait(0)
    m.pull_wait(0)                      # reported once; the model goes on
    m.push(np.ones(2, np.float32), 0)
    out = np.zeros(2, np.float32)
    m.pull_req(out, 0)
    m.pull_wait(0)
    np.testing.assert_array_equal(out, [1, 1])


def test_cxx_spellings():
    m = ms.ps.CreateSharedModel("local", updater=ms.ps.SGDUpdater(0.5))
    m.SetParam("bigarray_bound", "100")
    m.SetParam("update_on_server", "0")     # the pushes are summed, SGD is not applied
    m.Init([0, 1])
    m.InitKey((2, 2), 3)
    a = ms.new_tensor((2, 2), init=2.0)
    b = ms.new_tensor((2, 2), init=3.0)
    m.Push(a, 3, 0)
    m.Push(b, 3, 1, 7)
    hits = []
    m.PullReq(a, 3, 0, 0, lambda: hits.append(0))
    m.PullReq(b, 3, 1, 0, lambda: hits.append(1))
    m.PullWait(3, 0)
    m.PullWait(3, 1)
    assert sorted(hits) == [0, 1]
    np.testing.assert_array_equal(a.numpy(), np.full((2, 2), 5.0))
    m.CheckWeight(b, 3)
    m.SetWeight_(ms.new_tensor((2, 2), init=1.0), 3)
    with pytest.raises(MShadowError, match="differs"):
        m.CheckWeight(b, 3)
    m.close()


def test_bad_input_raises_typed_errors(model):
    m = model(devices=(0, 2))
    m.init_key(1, (3, 4), np.float32)
    with pytest.raises(KeyError, match="init_key"):
        m.push(np.zeros((3, 4), np.float32), 9)
    with pytest.raises(ShapeError, match=r"\(4, 3\)"):
        m.push(np.zeros((4, 3), np.float32), 1)
    with pytest.raises(DTypeError, match="float64"):
        m.push(np.zeros((3, 4)), 1)
    with pytest.raises(DeviceError, match="devid 1"):
        m.push(np.zeros((3, 4), np.float32), 1, devid=1)
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros((3, 4), np.float32)
        ro.flags.writeable = False
        m.pull_req(ro, 1)
    t = ms.new_tensor((3, 4))
    ms.free_space(t)
    with pytest.raises(FreedTensorError):
        m.push(t, 1)
    m.push(np.zeros((3, 4), np.float32), 1, devid=0)
    with pytest.raises(MShadowError, match="twice"):
        m.push(np.zeros((3, 4), np.float32), 1, devid=0)
    with pytest.raises(MShadowError, match="already initialised"):
        m.init_key(1, (3, 4), np.float32)
    with pytest.raises(TypeError, match="int"):
        m.init_key("w", (3,), np.float32)
    with pytest.raises(ParamError, match="unknown parameter 'bogus'"):
        m.set_param("bogus", 1)
    with pytest.raises(ParamError, match="timeout"):
        m.set_param("timeout", 0)
    with pytest.raises(ParamError, match="bigarray_bound"):
        m.set_param("bigarray_bound", 0)
    with pytest.raises(ValueError, match="unknown shared model type"):
        ms.ps.create_shared_model("zmq")
    m.set_param("pull_thread", "one")   # mshadow-ps local knobs are accepted and ignored


def test_pull_pins_the_destination_until_done(model):
    m = model(devices=(0, 1))
    m.init_key(0, (4,), np.float32)
    out = ms.new_tensor((4,))
    m.push(np.ones(4, np.float32), 0, devid=0)
    m.pull_req(out, 0, devid=0)         # waits for device 1's push
    with pytest.raises(BufferError):
        ms.free_space(out)
    with pytest.raises(MShadowError, match="pending"):
        m.pull_req(out, 0, devid=0)
    m.push(np.ones(4, np.float32), 0, devid=1)
    m.pull_wait(0, devid=0)
    np.testing.assert_array_equal(out.numpy(), [2, 2, 2, 2])
    ms.free_space(out)                  # released once the pull is done


def test_round_completes_while_the_caller_computes(model):
    m = model(devices=(0, 1))
    m.init_key(0, (64, 64), np.float32)
    done = threading.Event()
    out = ms.new_tensor((64, 64))
    m.push(ms.new_tensor((64, 64), init=1.0), 0, devid=0)
    m.pull_req(out, 0, done.set, devid=0)
    pusher = threading.Thread(target=m.push, args=(ms.new_tensor((64, 64), init=2.0), 0),
                              kwargs={"devid": 1})
    pusher.start()
    assert done.wait(20)                # no pull_wait: the server thread did the work
    pusher.join()
    np.testing.assert_array_equal(out.numpy(), np.full((64, 64), 3.0, np.float32))
    m.pull_wait(0)
