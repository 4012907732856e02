"""ExpEngine placeholder: replaced by the compiled Plan engine."""
import numpy as np


def assign(dst, value, saver):
    a = dst.numpy()
    v = np.asarray(value)
    if saver == "saveto":
        a[...] = v
    elif saver == "plusto":
        a += v
    elif saver == "minusto":
        a -= v
    elif saver == "multo":
        a *= v
    else:
        a /= v
