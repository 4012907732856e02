"""A two-layer neural net trained with SGD: mshadow's guide/neuralnet/nnet.cu in Python.

The guide trains a 784-100-10 MLP on MNIST; this machine cannot download data, so the net
learns to classify points from Gaussian clusters it generates (the same code runs on any
(n, features) float32 data). Every step is a handful of fused mshadow assignments:
dot for the layers, broadcast for the bias, sigmoid, softmax, sum_rows for the bias
gradients, and the SGD update with weight decay.

Run: python examples/neuralnet.py [epochs]
"""
import sys

import numpy as np

import mshadow as ms


def make_data(n, nfeature, nclass, seed):
    """n points around nclass random centres (one draw of centres for every split)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1.0, (nclass, nfeature)).astype(np.float32)
    label = rng.integers(0, nclass, n)
    x = centres[label] + rng.normal(0, 1.5, (n, nfeature)).astype(np.float32)
    return x.astype(np.float32), label.astype(np.float32)


class NNet:
    """784-100-10 in the guide; here nfeature-nhidden-nclass, sigmoid hidden layer."""

    def __init__(self, batch, nfeature, nhidden, nclass, seed=0):
        rnd = ms.Random(seed=seed)
        self.ninput = ms.TensorContainer((batch, nfeature), pad=False)
        self.nhidden = ms.TensorContainer((batch, nhidden))
        self.nhiddenbak = ms.TensorContainer((batch, nhidden))
        self.nout = ms.TensorContainer((batch, nclass))
        self.Wi2h = ms.TensorContainer((nfeature, nhidden))
        self.Wh2o = ms.TensorContainer((nhidden, nclass))
        self.hbias = ms.TensorContainer((nhidden,), init=0)
        self.obias = ms.TensorContainer((nclass,), init=0)
        self.g_Wi2h = ms.TensorContainer((nfeature, nhidden))
        self.g_Wh2o = ms.TensorContainer((nhidden, nclass))
        self.g_hbias = ms.TensorContainer((nhidden,))
        self.g_obias = ms.TensorContainer((nclass,))
        rnd.sample_gaussian(self.Wi2h, 0, 0.01)
        rnd.sample_gaussian(self.Wh2o, 0, 0.01)

    def forward(self, x):
        ms.copy(self.ninput, x)
        self.nhidden[:] = ms.dot(self.ninput, self.Wi2h)
        self.nhidden[:] = ms.F(ms.op.sigmoid, self.nhidden + ms.repmat(self.hbias, self.nhidden.shape[0]))
        ms.copy(self.nhiddenbak, self.nhidden)
        self.nout[:] = ms.dot(self.nhiddenbak, self.Wh2o)
        self.nout += ms.repmat(self.obias, self.nout.shape[0])
        ms.softmax(self.nout, self.nout)
        return self.nout

    def backprop(self, label):
        # gradient of the softmax cross-entropy: nout - onehot(label), averaged over the batch
        batch = self.nout.shape[0]
        self.nout[:] = (self.nout - ms.one_hot_encode(label, self.nout.shape[1])) / batch
        self.g_Wh2o[:] = ms.dot(self.nhiddenbak.T, self.nout)
        self.g_obias[:] = ms.sum_rows(self.nout)
        # back through the hidden layer: sigmoid' = h * (1 - h)
        self.nhiddenbak[:] = ms.dot(self.nout, self.Wh2o.T)
        self.nhiddenbak[:] = self.nhiddenbak * self.nhidden * (1.0 - self.nhidden)
        self.g_Wi2h[:] = ms.dot(self.ninput.T, self.nhiddenbak)
        self.g_hbias[:] = ms.sum_rows(self.nhiddenbak)

    def update(self, eta, wd):
        for w, g in ((self.Wi2h, self.g_Wi2h), (self.Wh2o, self.g_Wh2o)):
            w[:] = w - eta * (g + wd * w)        # one fused pass a tensor
        for b, g in ((self.hbias, self.g_hbias), (self.obias, self.g_obias)):
            b -= eta * g


def train(epochs=10, batch=100, seed=0, verbose=True):
    nfeature, nhidden, nclass = 20, 32, 4
    x, y = make_data(5000, nfeature, nclass, seed)
    xtrain, ytrain, xtest, ytest = x[:4000], y[:4000], x[4000:], y[4000:]
    net = NNet(batch, nfeature, nhidden, nclass, seed)
    errs = []
    for epoch in range(epochs):
        for i in range(0, len(xtrain) - batch + 1, batch):
            net.forward(ms.from_numpy(xtrain[i:i + batch]))
            net.backprop(ms.from_numpy(ytrain[i:i + batch]))
            net.update(eta=0.8, wd=1e-5)
        wrong = 0
        for i in range(0, len(xtest) - batch + 1, batch):
            pred = np.asarray(net.forward(ms.from_numpy(xtest[i:i + batch]))).argmax(axis=1)
            wrong += int((pred != ytest[i:i + batch]).sum())
        errs.append(wrong / len(xtest))
        if verbose:
            print(f"round {epoch}: test-err={errs[-1]:f}")
    return errs


if __name__ == "__main__":
    train(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
