"""A two-layer MLP trained data-parallel over mshadow.ps (mshadow-ps's ISharedModel).

Every rank holds the whole net and computes the gradient of its share of each global batch
(divided by the global batch size, so the pushes sum to the full-batch gradient). The keys'
owners apply SGD (``w -= lr * (sum(g) + wd * w)``) and every rank pulls the new weights.
The output layer's gradients are pushed first and travel while the hidden layer's are
computed; the hidden layer gets the higher priority because the next forward needs it first.
Data: scikit-learn's bundled digits (8x8 images, 10 classes, fixed split), or small
generated Gaussian clusters (``--data synthetic``, no scikit-learn needed).

    python examples/neuralnet/nnet_dist.py                  # one process, "local" model
    mpiexec -n 4 python examples/neuralnet/nnet_dist.py     # 4 ranks, "mpi" model
    python examples/neuralnet/nnet_dist.py --scaling        # 1, 2, 4 ranks: samples/s table
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

try:
    import mshadow as ms
except ImportError:  # run from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    import mshadow as ms

KEYS = ("Wi2h", "hbias", "Wh2o", "obias")


def load(kind, seed=0):
    """(xtrain, ytrain, xtest, ytest), float32, the same on every rank."""
    if kind == "digits":
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise SystemExit("--data digits needs scikit-learn (pip install scikit-learn); "
                             "or use --data synthetic") from None
        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).astype(np.float32)
        order = np.random.default_rng(seed).permutation(len(x))     # fixed split
        x, y = x[order], y[order].astype(np.float32)
        return x[:1400], y[:1400], x[1400:], y[1400:]
    rng = np.random.default_rng(seed)
    nfeature, nclass, n = 20, 4, 2400
    centres = rng.normal(0, 1.0, (nclass, nfeature)).astype(np.float32)
    y = rng.integers(0, nclass, n)
    x = (centres[y] + rng.normal(0, 1.5, (n, nfeature))).astype(np.float32)
    return x[:2000], y[:2000].astype(np.float32), x[2000:], y[2000:].astype(np.float32)


class NNet:
    def __init__(self, batch, nfeature, nhidden, nclass, seed=0):
        rnd = ms.Random(seed=seed)
        self.ninput = ms.TensorContainer((batch, nfeature), pad=False)
        self.nhidden = ms.TensorContainer((batch, nhidden))
        self.nhiddenbak = ms.TensorContainer((batch, nhidden))
        self.nout = ms.TensorContainer((batch, nclass))
        self.w = {"Wi2h": ms.TensorContainer((nfeature, nhidden)),
                  "hbias": ms.TensorContainer((nhidden,), init=0),
                  "Wh2o": ms.TensorContainer((nhidden, nclass)),
                  "obias": ms.TensorContainer((nclass,), init=0)}
        self.g = {k: ms.TensorContainer(v.shape) for k, v in self.w.items()}   # padded rows
        rnd.sample_gaussian(self.w["Wi2h"], 0, 0.01)
        rnd.sample_gaussian(self.w["Wh2o"], 0, 0.01)

    def forward(self, x):
        w = self.w
        ms.copy(self.ninput, x)
        self.nhidden[:] = ms.dot(self.ninput, w["Wi2h"])
        self.nhidden[:] = ms.F(ms.op.sigmoid,
                               self.nhidden + ms.repmat(w["hbias"], self.nhidden.shape[0]))
        ms.copy(self.nhiddenbak, self.nhidden)
        self.nout[:] = ms.dot(self.nhiddenbak, w["Wh2o"])
        self.nout += ms.repmat(w["obias"], self.nout.shape[0])
        ms.softmax(self.nout, self.nout)
        return self.nout

    def backprop_top(self, label, global_batch):
        """Output-layer gradients, and the error sent back through Wh2o (read here, before
        the pull of Wh2o may overwrite it)."""
        g = self.g
        self.nout[:] = (self.nout - ms.one_hot_encode(label, self.nout.shape[1])) / global_batch
        g["Wh2o"][:] = ms.dot(self.nhiddenbak.T, self.nout)
        g["obias"][:] = ms.sum_rows(self.nout)
        self.nhiddenbak[:] = ms.dot(self.nout, self.w["Wh2o"].T)
        self.nhiddenbak[:] = self.nhiddenbak * self.nhidden * (1.0 - self.nhidden)

    def backprop_bottom(self):
        self.g["Wi2h"][:] = ms.dot(self.ninput.T, self.nhiddenbak)
        self.g["hbias"][:] = ms.sum_rows(self.nhiddenbak)


def error_rate(net, x, y):
    pred = np.asarray(net.forward(ms.from_numpy(x))).argmax(axis=1)
    return float((pred != y).mean())


def under_mpiexec():
    return any(v in os.environ for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                                         "PMIX_RANK"))


def train(args):
    backend = args.backend
    if backend == "auto":
        backend = "mpi" if under_mpiexec() else "local"
    xtrain, ytrain, xtest, ytest = load(args.data)
    nclass = int(max(ytrain.max(), ytest.max())) + 1
    model = ms.ps.create_shared_model(backend, updater=ms.ps.SGDUpdater(args.lr, args.wd),
                                      timeout=args.timeout)
    rank, size = model.rank, model.size
    if args.batch % size:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the {size} ranks")
    local = args.batch // size
    net = NNet(local, xtrain.shape[1], args.nhidden, nclass, seed=args.seed)
    for key, name in enumerate(KEYS):
        model.init_key(key, net.w[name].shape, np.float32, init=net.w[name])
    pulls = [0]

    def pulled():
        pulls[0] += 1

    tnet = NNet(len(xtest), xtrain.shape[1], args.nhidden, nclass)   # rank 0's, whole test set
    nbatch = len(xtrain) // args.batch
    train_time = 0.0
    err = None
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        for b in range(nbatch):
            lo = b * args.batch + rank * local
            net.forward(ms.from_numpy(xtrain[lo:lo + local]))
            net.backprop_top(ms.from_numpy(ytrain[lo:lo + local]), args.batch)
            for key in (2, 3):                 # output layer: on the wire during backprop_bottom
                model.push(net.g[KEYS[key]], key, priority=0)
                model.pull_req(net.w[KEYS[key]], key, pulled, priority=0)
            net.backprop_bottom()
            for key in (0, 1):
                model.push(net.g[KEYS[key]], key, priority=1)
                model.pull_req(net.w[KEYS[key]], key, pulled, priority=1)
            for key in range(len(KEYS)):
                model.pull_wait(key)
        train_time += time.perf_counter() - t0
        if rank == 0 and (epoch == args.epochs - 1 or args.verbose):
            for name in KEYS:
                ms.copy(tnet.w[name], net.w[name])
            err = error_rate(tnet, xtest, ytest)
            print(f"round {epoch}: test-err={err:f}", flush=True)
    assert pulls[0] == args.epochs * nbatch * len(KEYS), pulls
    model.close()
    if rank == 0:
        samples = args.epochs * nbatch * args.batch
        print(f"backend {backend} ranks {size}: {samples / train_time:.0f} samples/s "
              f"({samples} samples, {train_time:.2f} s) final test-err={err:f}", flush=True)
    return err


def scaling(args):
    """Run this script on 1, 2 and 4 ranks and tabulate samples/s and the test error."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("--scaling needs mpiexec (pip install mpi4py mpich)")
    base = [sys.executable, os.path.abspath(__file__), "--data", args.data, "--epochs",
            str(args.epochs), "--batch", str(args.batch), "--lr", str(args.lr)]
    runs = [("local, 1 process", base + ["--backend", "local"])]
    runs += [(f"mpi, {n} ranks", [mpiexec, "-n", str(n)] + base + ["--backend", "mpi"])
             for n in (1, 2, 4)]
    print(f"{'run':<18} {'samples/s':>10} {'test-err':>9}")
    for name, cmd in runs:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
        m = re.search(r"(\d+) samples/s .* final test-err=([\d.]+)", out)
        print(f"{name:<18} {m.group(1) if m else 'failed':>10} {m.group(2) if m else '':>9}",
              flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("digits", "synthetic"), default="digits")
    ap.add_argument("--backend", choices=("auto", "local", "mpi"), default="auto",
                    help="auto: mpi under mpiexec, else local")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=120, help="global batch (all ranks)")
    ap.add_argument("--nhidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.8)
    ap.add_argument("--wd", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a silent peer "
                    "counts as dead")
    ap.add_argument("--verbose", action="store_true", help="test error every epoch")
    ap.add_argument("--scaling", action="store_true", help="run on 1, 2, 4 ranks and compare")
    args = ap.parse_args(argv)
    if args.scaling:
        scaling(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
