"""examples/neuralnet: the nets' forward, backprop and update match a numpy transcription of the
same maths, training on the digits learns, and the printed figures are the ones computed.

The gradient checks need only numpy; training needs tqdm (the progress bar), the real digits
scikit-learn, the plot matplotlib: each test skips with that reason where one is missing.
"""
import importlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mshadow as ms
from mshadow.testing import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEURALNET = os.path.join(ROOT, "examples", "neuralnet")


@pytest.fixture(scope="module")
def mods():
    """The example modules, imported from examples/neuralnet/ (they import each other by name)."""
    sys.path.insert(0, NEURALNET)
    try:
        yield {name: importlib.import_module(name) for name in ("nnutil", "nnet", "convnet")}
    finally:
        sys.path.remove(NEURALNET)
        for name in ("nnutil", "nnet", "convnet"):
            sys.modules.pop(name, None)


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def onehot(y, n):
    return np.eye(n)[y.astype(int)]


def randomize(rng, *tensors, scale=0.3):
    """Weights big enough that every path of the net matters (the guide's N(0, 0.01) is tiny)."""
    for t in tensors:
        t.numpy()[...] = rng.normal(0, scale, t.shape)


def params(net, names):
    return {n: getattr(net, n).numpy().astype(np.float64).copy() for n in names}


# ---- the MLP ---------------------------------------------------------------------------
MLP = ("Wi2h", "Wh2o", "hbias", "obias")


def mlp_step(p, x, y, eta, wd):
    """nnet.cu's forward, backprop and update in numpy (float64): returns (softmax, new params)."""
    h = 1 / (1 + np.exp(-(x @ p["Wi2h"] + p["hbias"])))
    out = softmax(h @ p["Wh2o"] + p["obias"])
    g = (out - onehot(y, out.shape[1])) / len(x)
    dh = (g @ p["Wh2o"].T) * h * (1 - h)
    grads = {"Wi2h": x.T @ dh, "Wh2o": h.T @ g, "hbias": dh.sum(0), "obias": g.sum(0)}
    new = {}
    for n in MLP:
        decay = wd * p[n] if n.startswith("W") else 0.0   # no regularization for biases
        new[n] = p[n] - eta * (decay + grads[n])
    return out, new, grads


def mlp_forward(p, x):
    h = 1 / (1 + np.exp(-(x @ p["Wi2h"] + p["hbias"])))
    return softmax(h @ p["Wh2o"] + p["obias"])


def test_nnet_step_matches_numpy(mods):
    rng = np.random.default_rng(1)
    net = mods["nnet"].NNet(4, 6, 5, 3, eta=0.5, wd=0.01, seed=2)
    randomize(rng, *(getattr(net, n) for n in MLP))
    p = params(net, MLP)
    x = rng.uniform(0, 1, (4, 6)).astype(np.float32)
    y = np.array([0, 2, 1, 2], dtype=np.float32)
    want_out, want, grads = mlp_step(p, x.astype(np.float64), y, 0.5, 0.01)

    pred = ms.TensorContainer((4, 3))
    net.forward(ms.from_numpy(x), pred)
    np.testing.assert_allclose(pred.numpy(), want_out, rtol=1e-5, atol=1e-6)
    g = ((pred.numpy() - onehot(y, 3)) / 4).astype(np.float32)
    net.backprop(ms.from_numpy(g))
    for n in MLP:
        np.testing.assert_allclose(getattr(net, "g_" + n).numpy(), grads[n], rtol=1e-4,
                                   atol=1e-6, err_msg="g_" + n)
    net.update()
    for n in MLP:
        np.testing.assert_allclose(getattr(net, n).numpy(), want[n], rtol=1e-4, atol=1e-6,
                                   err_msg=n)


def test_training_loop_matches_numpy(mods):
    # one batch of training data and one round: train() takes exactly one SGD step, whose
    # result, loss and test error the numpy transcription gives too
    pytest.importorskip("tqdm", reason="the training loop shows a tqdm progress bar")
    nnutil = mods["nnutil"]
    rng = np.random.default_rng(3)
    batch = 8
    net = mods["nnet"].NNet(batch, 64, 12, 10, eta=0.8, seed=0)
    randomize(rng, *(getattr(net, n) for n in MLP))
    p = params(net, MLP)
    xtrain = rng.uniform(0, 1, (batch, 64)).astype(np.float32)
    ytrain = rng.integers(0, 10, batch).astype(np.float32)
    xtest = rng.uniform(0, 1, (21, 64)).astype(np.float32)   # not a multiple of the batch
    ytest = rng.integers(0, 10, 21).astype(np.float32)
    lines = []
    hist = nnutil.train(net, (xtrain, ytrain, xtest, ytest), 1, batch, progress=False,
                        log=lines.append)

    out, want, _ = mlp_step(p, xtrain.astype(np.float64), ytrain, 0.8, 1e-5)
    for n in MLP:
        np.testing.assert_allclose(getattr(net, n).numpy(), want[n], rtol=1e-4, atol=1e-6)
    loss = -np.log(out[np.arange(batch), ytrain.astype(int)]).mean()
    assert hist["loss"][0] == pytest.approx(loss, rel=1e-5)
    assert hist["train_acc"][0] == np.mean(out.argmax(1) == ytrain)
    err = np.mean(mlp_forward(want, xtest.astype(np.float64)).argmax(1) != ytest)
    assert hist["test_err"][0] == err
    assert lines == ["round 0: test-err=%f" % err]


def test_training_rejects_too_little_data(mods):
    pytest.importorskip("tqdm", reason="the training loop shows a tqdm progress bar")
    net = mods["nnet"].NNet(10, 64, 4, 10)
    x, y = np.zeros((5, 64), np.float32), np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="at least one batch"):
        mods["nnutil"].train(net, (x, y, x, y), 1, 10, progress=False)


# ---- the CNN ---------------------------------------------------------------------------
CNN = ("Ki2h", "Wh2o", "hbias", "obias")


def cnn_forward_backward(p, x, y, k, ps):
    """convnet.cu's layers in numpy loops: conv k x k stride 1, relu, ps x ps max-pool, fullc."""
    B, _, S, _ = x.shape
    C = p["Ki2h"].shape[0]
    kern = p["Ki2h"].reshape(C, k, k)
    n = S - k + 1
    conv = np.zeros((B, C, n, n))
    for i in range(n):
        for j in range(n):
            conv[:, :, i, j] = np.einsum("buv,cuv->bc", x[:, 0, i:i + k, j:j + k], kern)
    a = np.maximum(conv + p["hbias"][None, :, None, None], 0)
    m = (n - ps) // ps + 1
    pooled = np.zeros((B, C, m, m))
    for i in range(m):
        for j in range(m):
            pooled[:, :, i, j] = a[:, :, i * ps:(i + 1) * ps, j * ps:(j + 1) * ps].max(axis=(2, 3))
    flat = pooled.reshape(B, -1)
    out = softmax(flat @ p["Wh2o"] + p["obias"])
    g = (out - onehot(y, out.shape[1])) / B
    dpool = (g @ p["Wh2o"].T).reshape(pooled.shape)
    da = np.zeros_like(a)
    for i in range(m):
        for j in range(m):
            win = a[:, :, i * ps:(i + 1) * ps, j * ps:(j + 1) * ps]
            hit = win == pooled[:, :, i:i + 1, j:j + 1]     # the maximum of each window
            win_grad = hit * dpool[:, :, i:i + 1, j:j + 1]
            da[:, :, i * ps:(i + 1) * ps, j * ps:(j + 1) * ps] += win_grad
    dconv = da * (a > 0)
    gk = np.zeros((C, k, k))
    for u in range(k):
        for v in range(k):
            gk[:, u, v] = np.einsum("bcij,bij->c", dconv, x[:, 0, u:u + n, v:v + n])
    grads = {"Ki2h": gk.reshape(C, k * k), "Wh2o": flat.T @ g, "hbias": dconv.sum((0, 2, 3)),
             "obias": g.sum(0)}
    return out, grads


@pytest.mark.parametrize("insize", [6, 7])   # 7: the pool leaves the last conv row and column out
def test_convnet_step_matches_numpy(mods, insize):
    rng = np.random.default_rng(insize)
    B, C, k, ps, nout = 3, 4, 3, 2, 5
    net = mods["convnet"].ConvNet(B, insize, C, k, 1, ps, nout, eta=0.3, wd=0.01, seed=1)
    randomize(rng, *(getattr(net, n) for n in CNN))
    p = params(net, CNN)
    x = rng.uniform(-1, 1, (B, 1, insize, insize)).astype(np.float32)
    y = np.array([4, 0, 2], dtype=np.float32)
    want_out, grads = cnn_forward_backward(p, x.astype(np.float64), y, k, ps)

    pred = ms.TensorContainer((B, nout))
    net.forward(ms.from_numpy(x), pred)
    np.testing.assert_allclose(pred.numpy(), want_out, rtol=1e-5, atol=1e-6)
    g = ((pred.numpy() - onehot(y, nout)) / B).astype(np.float32)
    net.backprop(ms.from_numpy(g))
    for n in CNN:
        np.testing.assert_allclose(getattr(net, "g_" + n).numpy(), grads[n], rtol=1e-4,
                                   atol=1e-6, err_msg="g_" + n)
    net.update()
    for n in CNN:
        decay = 0.01 * p[n] if n.startswith(("K", "W")) else 0.0
        np.testing.assert_allclose(getattr(net, n).numpy(), p[n] - 0.3 * (decay + grads[n]),
                                   rtol=1e-4, atol=1e-6, err_msg=n)


# ---- data, training, plot --------------------------------------------------------------
def test_real_digits_split(mods):
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn")
    xtrain, ytrain, xtest, ytest = mods["nnutil"].load_digits()
    assert xtrain.shape == (1297, 64) and xtest.shape == (500, 64)
    assert xtrain.dtype == np.float32 and 0 <= xtrain.min() and xtrain.max() == 1
    assert sorted(set(ytest.tolist())) == list(range(10))       # stratified: every digit
    again = mods["nnutil"].load_digits()
    np.testing.assert_array_equal(again[2], xtest)               # the split is fixed


def test_missing_sklearn_says_what_to_install(mods, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(SystemExit, match=r"mshadow\[examples\].*--synthetic"):
        mods["nnutil"].load_digits()


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "--batch must be at least 1, got 0"),
    (["--epochs", "-1"], "--epochs must be at least 1, got -1"),
    (["--eta", "0"], "--eta must be positive, got 0.0"),
    (["--ntrain", "5"], r"--ntrain \(5\) must be at least one batch \(10\)"),
    (["--plot", "/nonexistent-dir/x.png"], "no such directory"),
])
def test_bad_flags(mods, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        mods["nnet"].main(["--synthetic", *args])
    assert e.value.code == 2
    assert re.search(message, capsys.readouterr().err)


ROUND = re.compile(r"round (\d+): test-err=([0-9.]+)")


def run_main(mods, capsys, name, *args):
    hist = mods[name].main(["--no-progress", "--plot", "", *args])
    out = capsys.readouterr().out
    printed = [(int(r), float(e)) for r, e in ROUND.findall(out)]
    assert printed == [(i, pytest.approx(e, abs=5e-7)) for i, e in enumerate(hist["test_err"])]
    assert "final test-err=%f" % hist["test_err"][-1] in out
    return hist


@pytest.mark.parametrize("name, epochs, bound", [("nnet", 6, 0.12), ("convnet", 3, 0.15)])
def test_learns_real_digits(mods, capsys, name, epochs, bound):
    # a few rounds of the real run (20 rounds reach about 2%); chance is 90%
    pytest.importorskip("tqdm", reason="the training loop shows a tqdm progress bar")
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn")
    hist = run_main(mods, capsys, name, "--epochs", str(epochs))
    assert hist["test_err"][-1] < bound
    assert hist["loss"][-1] < hist["loss"][0]


@pytest.mark.parametrize("name", ["nnet", "convnet"])
def test_learns_synthetic(mods, capsys, name):
    pytest.importorskip("tqdm", reason="the training loop shows a tqdm progress bar")
    hist = run_main(mods, capsys, name, "--synthetic", "--epochs", "2")
    assert hist["test_err"][-1] < 0.1        # ten well-separated clusters


def test_plot_png(mods, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot is drawn with matplotlib")
    import matplotlib.image
    hist = {"loss": [2.0, 1.0, 0.5], "train_acc": [0.3, 0.7, 0.9], "test_err": [0.6, 0.3, 0.1],
            "seconds": [1, 2, 3]}
    path = mods["nnutil"].plot(hist, str(tmp_path / "curve.png"), "title")
    assert path == str(tmp_path / "curve.png")
    img = matplotlib.image.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400
    assert img[..., :3].std() > 0.05            # something was drawn


def test_command_line(tmp_path):
    # python examples/neuralnet/nnet.py as a user runs it, with a plot
    for mod in ("tqdm", "matplotlib"):
        pytest.importorskip(mod, reason=f"the example needs {mod}")
    env = child_env()
    png = tmp_path / "nnet.png"
    res = subprocess.run([sys.executable, os.path.join(NEURALNET, "nnet.py"), "--synthetic",
                          "--epochs", "1", "--ntrain", "200", "--plot", str(png)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert ROUND.search(res.stdout) and f"plot saved to {png}" in res.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
