"""A two-layer neural net trained with SGD: mshadow's guide/neuralnet/nnet.cu in Python.

The guide trains a 784-100-10 MLP on MNIST; this one trains 64-100-10 on scikit-learn's 8x8
handwritten digits (sigmoid hidden layer, softmax output, weights ~ N(0, 0.01), SGD with
weight decay 1e-5 and eta 0.8 as in the C++, batches of 10 instead of 100). Each step is a
handful of fused mshadow assignments: dot for the layers, repmat for the biases, F(sigmoid),
Softmax, sum_rows for the bias gradients.

Run: python examples/neuralnet/nnet.py [--epochs N] [--plot nnet.png]
Needs: pip install 'mshadow[examples]'  (scikit-learn, tqdm, matplotlib)
"""
import sys

import mshadow as ms

import nnutil


class NNet:
    """The guide's NNet: nodes and weights are TensorContainers sized once."""

    def __init__(self, batch_size, num_in, num_hidden, num_out, eta=0.8, wd=1e-5, seed=0):
        self.input_shape = (num_in,)
        self.eta, self.wd = eta, wd
        rnd = ms.Random(seed=seed)
        self.ninput = ms.TensorContainer((batch_size, num_in))
        self.nhidden = ms.TensorContainer((batch_size, num_hidden))
        self.nhiddenbak = ms.TensorContainer((batch_size, num_hidden))
        self.nout = ms.TensorContainer((batch_size, num_out))
        self.hbias = ms.TensorContainer((num_hidden,), init=0.0)
        self.obias = ms.TensorContainer((num_out,), init=0.0)
        self.g_hbias = ms.TensorContainer((num_hidden,))
        self.g_obias = ms.TensorContainer((num_out,))
        self.Wi2h = ms.TensorContainer((num_in, num_hidden))
        self.Wh2o = ms.TensorContainer((num_hidden, num_out))
        self.g_Wi2h = ms.TensorContainer((num_in, num_hidden))
        self.g_Wh2o = ms.TensorContainer((num_hidden, num_out))
        rnd.sample_gaussian(self.Wi2h, 0, 0.01)
        rnd.sample_gaussian(self.Wh2o, 0, 0.01)

    def forward(self, inbatch, oubatch):
        batch_size = inbatch.size(0)
        ms.copy(self.ninput, inbatch)
        # first layer, fullc
        self.nhidden[:] = ms.dot(self.ninput, self.Wi2h)
        self.nhidden += ms.repmat(self.hbias, batch_size)
        # activation, sigmoid; keep the activation in nhidden
        self.nhidden[:] = ms.F(ms.op.sigmoid, self.nhidden)
        ms.copy(self.nhiddenbak, self.nhidden)
        # second layer fullc
        self.nout[:] = ms.dot(self.nhiddenbak, self.Wh2o)
        self.nout += ms.repmat(self.obias, batch_size)
        ms.softmax(self.nout, self.nout)
        ms.copy(oubatch, self.nout)

    def backprop(self, gradout):
        ms.copy(self.nout, gradout)
        # gradient of layer 2
        self.g_obias[:] = ms.sum_rows(self.nout)
        self.g_Wh2o[:] = ms.dot(self.nhiddenbak.T, self.nout)
        # back to layer 1, through the sigmoid: h * (1 - h)
        self.nhiddenbak[:] = ms.dot(self.nout, self.Wh2o.T)
        self.nhidden[:] = self.nhidden * (1.0 - self.nhidden) * self.nhiddenbak
        self.g_hbias[:] = ms.sum_rows(self.nhidden)
        self.g_Wi2h[:] = ms.dot(self.ninput.T, self.nhidden)

    def update(self):
        eta, wd = self.eta, self.wd
        self.Wi2h -= eta * (wd * self.Wi2h + self.g_Wi2h)   # one fused pass each
        self.Wh2o -= eta * (wd * self.Wh2o + self.g_Wh2o)
        # no regularization for the biases
        self.hbias -= eta * self.g_hbias
        self.obias -= eta * self.g_obias


def make_net(args):
    return NNet(args.batch, nnutil.SIDE * nnutil.SIDE, 100, nnutil.NCLASS, eta=args.eta,
                seed=args.seed)


def main(argv=None):
    return nnutil.run(argv, "nnet", __doc__, make_net, "MLP 64-100-10 on the 8x8 digits",
                      epochs=20, batch=10, eta=0.8)


if __name__ == "__main__":
    main(sys.argv[1:])
