"""What nnet.py and convnet.py share: the data, the training loop of the guide's main(), the plot.

guide/neuralnet/util.h loads MNIST; these examples train on scikit-learn's bundled handwritten
digits instead (1,797 8x8 images, no download), with one fixed train/test split. ``--synthetic``
swaps in Gaussian clusters of the same shape, for the tests of a machine without scikit-learn.
"""
import argparse
import importlib
import os
import sys
import time

import numpy as np

import mshadow as ms

NCLASS = 10
SIDE = 8            # digits are 8x8 images
NTEST = 500         # fixed test set; the other 1,297 images train


def require(module, why, hint=""):
    """Import an optional dependency, or stop with what to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.exit(f"this example {why}: pip install 'mshadow[examples]'{hint}")


def load_digits():
    """(xtrain, ytrain, xtest, ytest): float32 pixels in [0, 1], float32 labels 0..9.

    The split is the same on every call: 500 test images, stratified by digit."""
    why, hint = "trains on scikit-learn's digits", " (or pass --synthetic for generated data)"
    datasets = require("sklearn.datasets", why, hint)
    train_test_split = require("sklearn.model_selection", why, hint).train_test_split
    digits = datasets.load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.float32)
    xtrain, xtest, ytrain, ytest = train_test_split(x, y, test_size=NTEST, random_state=0,
                                                    stratify=y)
    return xtrain, ytrain, xtest, ytest


def synthetic_digits(n=1797, seed=0):
    """Gaussian clusters shaped like the digits: ten 64-pixel centres plus noise."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 1, (NCLASS, SIDE * SIDE))
    y = rng.integers(0, NCLASS, n)
    x = np.clip(centres[y] + rng.normal(0, 0.3, (n, SIDE * SIDE)), 0, 1)
    x, y = x.astype(np.float32), y.astype(np.float32)
    return x[NTEST:], y[NTEST:], x[:NTEST], y[:NTEST]


def parse_args(argv, name, doc, epochs, batch, eta):
    p = argparse.ArgumentParser(prog=name, description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=epochs, help="rounds over the training set")
    p.add_argument("--batch", type=int, default=batch, help="minibatch size")
    p.add_argument("--eta", type=float, default=eta, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=0, help="weights and shuffling")
    p.add_argument("--ntrain", type=int, default=None, help="use only the first N training images")
    p.add_argument("--synthetic", action="store_true",
                   help="generated clusters instead of scikit-learn's digits (for tests)")
    p.add_argument("--plot", default=f"{name}.png",
                   help="where to save the loss/accuracy plot (PNG); '' for none")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    for flag in ("epochs", "batch"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    if not args.eta > 0:
        p.error(f"--eta must be positive, got {args.eta}")
    if args.ntrain is not None and args.ntrain < args.batch:
        p.error(f"--ntrain ({args.ntrain}) must be at least one batch ({args.batch})")
    if args.plot and not os.path.isdir(os.path.dirname(os.path.abspath(args.plot))):
        p.error(f"--plot {args.plot}: no such directory")   # before training, not after
    return args


def data_for(args):
    data = synthetic_digits(seed=args.seed) if args.synthetic else load_digits()
    if args.ntrain is not None:
        data = (data[0][:args.ntrain], data[1][:args.ntrain]) + data[2:]
    return data


def train(net, data, epochs, batch, seed=0, progress=True, log=print):
    """The guide's main loop: SGD over minibatches, then the test error, once per round.

    ``net`` has forward(inbatch, outbatch), backprop(gradout) and update(); inputs are
    reshaped to ``net.input_shape`` per image. Returns the history: per round the mean
    training cross-entropy, the training accuracy and the test error.
    """
    tqdm = require("tqdm", "shows a tqdm progress bar").tqdm
    xtrain, ytrain, xtest, ytest = data
    if len(xtrain) < batch or len(xtest) < batch:
        raise ValueError(f"need at least one batch ({batch}) of training and of test data")
    shape = (batch,) + tuple(net.input_shape)
    pred = ms.TensorContainer((batch, NCLASS))
    label = ms.TensorContainer((batch,))
    rng = np.random.default_rng(seed)
    history: dict[str, list[float]] = {"loss": [], "train_acc": [], "test_err": [], "seconds": []}
    start = time.perf_counter()
    nbatch = len(xtrain) // batch
    bar = tqdm(total=epochs * nbatch, disable=not progress, unit="batch", leave=False)
    for rnd in range(epochs):
        order = rng.permutation(len(xtrain))     # the guide keeps MNIST's order; digits are few
        loss = correct = 0.0
        bar.set_description(f"round {rnd}")
        for b in range(nbatch):
            idx = order[b * batch:(b + 1) * batch]
            net.forward(ms.from_numpy(xtrain[idx].reshape(shape)), pred)
            p = pred.numpy()
            y = ytrain[idx].astype(np.intp)
            loss += -np.log(np.maximum(p[np.arange(batch), y], 1e-30)).sum()
            correct += (p.argmax(axis=1) == y).sum()
            # the gradient of softmax cross-entropy, scaled by the batch size
            ms.copy(label, ms.from_numpy(ytrain[idx]))
            pred -= ms.one_hot_encode(label, NCLASS)
            pred *= 1.0 / batch
            net.backprop(pred)
            net.update()
            bar.update()
        history["loss"].append(loss / (nbatch * batch))
        history["train_acc"].append(correct / (nbatch * batch))
        history["test_err"].append(error_rate(net, xtest, ytest, shape, pred))
        history["seconds"].append(time.perf_counter() - start)
        bar.set_postfix(test_err=history["test_err"][-1])
        log("round %d: test-err=%f" % (rnd, history["test_err"][-1]))
    bar.close()
    return history


def error_rate(net, x, y, shape, pred):
    """Every test image counts once: the net's batch is fixed, so the last batch overlaps the
    one before it and only its new images are scored."""
    batch = shape[0]
    wrong = 0
    for j in range(0, len(x), batch):
        lo = min(j, len(x) - batch)
        net.forward(ms.from_numpy(x[lo:lo + batch].reshape(shape)), pred)
        guess = pred.numpy().argmax(axis=1)[j - lo:]
        wrong += int((guess != y[j:lo + batch]).sum())
    return wrong / len(x)


def plot(history, path, title):
    """Training loss and train/test accuracy per round, saved as a PNG."""
    require("matplotlib", "draws its plot with matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    rounds = np.arange(1, len(history["loss"]) + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.plot(rounds, history["loss"], "o-")
    ax1.set(xlabel="round", ylabel="training cross-entropy", title="loss")
    ax2.plot(rounds, 100 * np.asarray(history["train_acc"]), "o-", label="train")
    ax2.plot(rounds, 100 * (1 - np.asarray(history["test_err"])), "s-", label="test")
    ax2.set(xlabel="round", ylabel="accuracy (%)", title="accuracy")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return os.path.abspath(path)


def run(argv, name, doc, make_net, title, epochs, batch, eta):
    """Parse the flags, train, print the summary, save the plot; returns the history."""
    args = parse_args(argv, name, doc, epochs, batch, eta)
    tqdm = require("tqdm", "shows a tqdm progress bar").tqdm
    data = data_for(args)
    net = make_net(args)
    history = train(net, data, args.epochs, args.batch, seed=args.seed,
                    progress=not args.no_progress, log=tqdm.write)
    print("final test-err=%f after %d rounds in %.1f s"
          % (history["test_err"][-1], args.epochs, history["seconds"][-1]))
    if args.plot:
        print("plot saved to", plot(history, args.plot, title))
    return history
