"""The main demo: tensor views, fused expressions, a user operator and a compiled plan.

A tour in the spirit of mshadow's guide/basic.cpp; examples/guide/ has the exact ports of the
guide programs, and examples/neuralnet/ trains networks with them.
Run: python examples/basic.py
"""
import numpy as np

import mshadow as ms


def show(title, t):
    print(title)
    for row in np.asarray(t).reshape(-1, t.shape[-1]):
        print(" ".join(f"{v:.2f}" for v in row))


def main():
    # A tensor is a view: pointer, shape and row stride over memory someone else owns.
    data = np.zeros(20, dtype=np.float32)
    ts = ms.from_numpy(data.reshape(2, 5, 2))   # Tensor<cpu, 3>(data, Shape3(2, 5, 2))
    mat = ts[0]                                   # the (5, 2) sub-tensor, sharing memory
    print("ts.shape", ts.shape, "mat.shape", mat.shape, "stride", mat.stride)

    mat[:] = 0.0
    for i in range(mat.size(0)):
        for j in range(mat.size(1)):
            mat[i][j] = i * 2 + j
    # One fused pass: no temporary for (mat + 10) / 10 + 2.
    mat += (mat + 10) / 10 + 2
    show("mat += (mat + 10) / 10 + 2", mat)
    print("data behind the view changed too:", data[:4])

    # Explicit aligned, pitched allocation: each row starts on a 64-byte boundary.
    w = ms.new_tensor((4, 3), init=1.0, pad=True)
    g = ms.new_tensor((4, 3), init=0.5, pad=True)
    print("padded (4,3) float32: stride", w.stride, "elements; contiguous:", w.check_contiguous())

    # An SGD step with weight decay: w = w - eta * (g + lam * w), evaluated once per element.
    eta, lam = 0.1, 0.01
    w[:] = w - eta * (g + lam * w)
    show("after one SGD step", w)

    # Element-wise operators and a user-defined one, traced and compiled like a built-in.
    @ms.op.define
    def maxoftwo(a, b):
        return ms.op.where(a > b, a, b)

    x = ms.from_numpy(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    y = ms.new_tensor((4, 3))
    y[:] = ms.F(maxoftwo, ms.F(ms.op.tanh, x), ms.F(ms.op.sigmoid, x) - 0.5) * 2
    show("2 * max(tanh(x), sigmoid(x) - 0.5)", y)

    # The compiled plan, as numexpr's disassemble shows its program.
    print("plan of w[:] = w - eta * (g + lam * w):")
    print(ms.plan_for(w, w - eta * (g + lam * w)).disassemble())

    # Freed memory is never touched: using a freed tensor or its views raises.
    view = w[1]
    ms.free_space(w)
    try:
        view[:] = 1.0
    except ms.FreedTensorError as e:
        print("after free_space:", e)
    ms.free_space(g)


if __name__ == "__main__":
    main()
