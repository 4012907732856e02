"""A small convolutional net trained with SGD: mshadow's guide/neuralnet/convnet.cu in Python.

conv -> relu -> max-pool -> fullc -> softmax, on scikit-learn's 8x8 handwritten digits (the
guide: 10 5x5 kernels on 28x28 MNIST). The convolution is im2col: ``unpack_patch2col`` lays
every 3x3 patch out as a column and one ``dot`` with the kernels computes all outputs, which
``reshape`` and ``swapaxis`` put back in (batch, channel, y, x) order. Pooling is ``pool``,
its gradient ``unpool``, the output ``Softmax``. SGD as in the guide (weights ~ N(0, 0.01),
weight decay 1e-5) with eta 0.2 and batches of 10: the guide's 0.1 and 100 suit MNIST's 60,000
images, the digits are only 1,297.

The extension functions take tensors, not expressions, so where the C++ chains
``swapaxis<1,0>(reshape(tmp_dst, ...))`` this port assigns the reshape to a tensor first.

Run: python examples/neuralnet/convnet.py [--epochs N] [--plot convnet.png]
Needs: pip install 'mshadow[examples]'  (scikit-learn, tqdm, matplotlib)
"""
import sys

import mshadow as ms

import nnutil


@ms.op.define
def relu_grad(a):
    return ms.op.where(a > 0, 1.0, 0.0)


class ConvNet:
    """The guide's ConvNet: conv(nchannel, ksize x ksize, kstride) - relu - pool(psize) - fullc."""

    def __init__(self, batch_size, insize, nchannel, ksize, kstride, psize, num_out,
                 eta=0.1, wd=1e-5, seed=0):
        self.input_shape = (1, insize, insize)
        self.ksize, self.kstride, self.psize = ksize, kstride, psize
        self.eta, self.wd = eta, wd
        rnd = ms.Random(seed=seed)
        conv = (insize - ksize) // kstride + 1
        # the guide sizes the pooled map (conv + 1 - psize) // psize, which drops the last
        # window whenever conv is even: 2 of 3 here; every full window is kept instead
        pooled = (conv - psize) // psize + 1
        self.ninput = ms.TensorContainer((batch_size, 1, insize, insize))
        self.nhidden = ms.TensorContainer((batch_size, nchannel, conv, conv))
        self.nhiddenbak = ms.TensorContainer(self.nhidden.shape)
        # contiguous, so that reshape can regroup its last axes
        self.npool = ms.TensorContainer((batch_size, nchannel, pooled, pooled), pad=False)
        self.npoolbak = ms.TensorContainer(self.npool.shape)
        self.nflat = ms.TensorContainer((batch_size, nchannel * pooled * pooled))
        self.nout = ms.TensorContainer((batch_size, num_out))
        self.hbias = ms.TensorContainer((nchannel,), init=0.0)
        self.obias = ms.TensorContainer((num_out,), init=0.0)
        self.g_hbias = ms.TensorContainer((nchannel,))
        self.g_obias = ms.TensorContainer((num_out,))
        # Ki2h is the convolution kernel, one row of ksize*ksize weights per channel
        self.Ki2h = ms.TensorContainer((nchannel, ksize * ksize))
        self.Wh2o = ms.TensorContainer((self.nflat.shape[1], num_out))
        self.g_Ki2h = ms.TensorContainer(self.Ki2h.shape)
        self.g_Wh2o = ms.TensorContainer(self.Wh2o.shape)
        rnd.sample_gaussian(self.Ki2h, 0, 0.01)
        rnd.sample_gaussian(self.Wh2o, 0, 0.01)
        # im2col helpers: columns of patches, the kernels' outputs, and their 4-D view
        npix = batch_size * conv * conv
        self.tmp_col = ms.TensorContainer((ksize * ksize, npix), pad=False)
        self.tmp_dst = ms.TensorContainer((nchannel, npix), pad=False)
        self.tmp_4d = ms.TensorContainer((nchannel, batch_size, conv, conv), pad=False)

    def forward(self, inbatch, oubatch):
        batch_size = inbatch.size(0)
        ms.copy(self.ninput, inbatch)
        self.conv_forward(self.ninput, self.Ki2h, self.nhidden)
        self.nhidden += ms.broadcast(self.hbias, self.nhidden.shape, 1)
        # relu; keep the activation in nhiddenbak for the pooling gradient
        self.nhidden[:] = ms.F(ms.op.relu, self.nhidden)
        ms.copy(self.nhiddenbak, self.nhidden)
        p = self.psize
        self.npool[:] = ms.pool(self.nhiddenbak, p, p, p, p, pshape=self.npool.shape[2:])
        ms.copy(self.npoolbak, self.npool)
        self.nflat[:] = ms.reshape(self.npool, self.nflat.shape)
        self.nout[:] = ms.dot(self.nflat, self.Wh2o)
        self.nout += ms.repmat(self.obias, batch_size)
        ms.softmax(self.nout, self.nout)
        ms.copy(oubatch, self.nout)

    def backprop(self, gradout):
        ms.copy(self.nout, gradout)
        self.g_obias[:] = ms.sum_rows(self.nout)
        self.g_Wh2o[:] = ms.dot(self.nflat.T, self.nout)
        # back to the pooling layer
        self.nflat[:] = ms.dot(self.nout, self.Wh2o.T)
        self.npool[:] = ms.reshape(self.nflat, self.npool.shape)
        p = self.psize
        self.nhiddenbak[:] = ms.unpool(self.nhiddenbak, self.npoolbak, self.npool, p, p, p, p)
        # through the relu
        self.nhidden[:] = ms.F(relu_grad, self.nhidden) * self.nhiddenbak
        self.g_hbias[:] = ms.sumall_except_dim(self.nhidden, 1)
        self.conv_backward(self.nhidden, self.g_Ki2h, self.ninput)

    def update(self):
        eta, wd = self.eta, self.wd
        self.Ki2h -= eta * (wd * self.Ki2h + self.g_Ki2h)
        self.Wh2o -= eta * (wd * self.Wh2o + self.g_Wh2o)
        # no regularization for the biases
        self.hbias -= eta * self.g_hbias
        self.obias -= eta * self.g_obias

    def conv_forward(self, inp, kernel, out):
        k, s = self.ksize, self.kstride
        self.tmp_col[:] = ms.unpack_patch2col(inp, k, k, s)
        self.tmp_dst[:] = ms.dot(kernel, self.tmp_col)
        # (channel, batch*y*x) -> (channel, batch, y, x) -> (batch, channel, y, x)
        self.tmp_4d[:] = ms.reshape(self.tmp_dst, self.tmp_4d.shape)
        out[:] = ms.swapaxis(self.tmp_4d, 1, 0)

    def conv_backward(self, out, g_kernel, inp):
        """The kernel gradient. The C++ also packs the input gradient back with
        pack_col2patch, which the first layer does not need; this port skips it."""
        k, s = self.ksize, self.kstride
        self.tmp_col[:] = ms.unpack_patch2col(inp, k, k, s)
        self.tmp_4d[:] = ms.swapaxis(out, 1, 0)
        self.tmp_dst[:] = ms.reshape(self.tmp_4d, self.tmp_dst.shape)
        g_kernel[:] = ms.dot(self.tmp_dst, self.tmp_col.T)


def make_net(args):
    return ConvNet(args.batch, nnutil.SIDE, nchannel=16, ksize=3, kstride=1, psize=2,
                   num_out=nnutil.NCLASS, eta=args.eta, seed=args.seed)


def main(argv=None):
    return nnutil.run(argv, "convnet", __doc__, make_net,
                      "conv 16x3x3 - relu - maxpool 2 - fullc 10 on the 8x8 digits",
                      epochs=20, batch=10, eta=0.2)


if __name__ == "__main__":
    main(sys.argv[1:])
