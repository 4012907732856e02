"""Tensors on streams: mshadow's guide/basic_stream.cu in Python.

Two (2, 5) tensors on their own streams are filled with 1 and 2 (on a GPU the two fills may
run side by side), then res = dot(ts1, ts2.T) runs on a third stream: each entry is
5 * (1 * 2) = 10. It runs on the GPU where there is one (or the emulated device, with
MSHADOW_CUDA=emulate), else on the CPU, whose streams are synchronous; both print the same.
Run: python examples/guide/basic_stream.py [--cpu]
"""
import sys

import mshadow as ms
from mshadow import cuda


def main(device):
    ms.init_tensor_engine(device)
    ts1 = ms.new_tensor((2, 5), 0.0, device=device)
    ts2 = ms.new_tensor((2, 5), 0.0, device=device)
    s1, s2 = ms.new_stream(device), ms.new_stream(device)
    ts1.set_stream(s1)
    ts2.set_stream(s2)
    ts1[:] = 1     # queued on s1
    ts2[:] = 2     # queued on s2, beside the fill above
    # the C++ goes on without these waits: the product on a third stream could read the
    # operands before their fills ran
    s1.wait()
    s2.wait()
    res = ms.new_tensor((2, 2), 0.0, device=device)
    stream = ms.new_stream(device)
    res.set_stream(stream)
    res[:] = ms.dot(ts1, ts2.T)   # on res's stream
    stream.wait()

    cpu_res = ms.new_tensor((2, 2), 0.0)
    ms.copy(cpu_res, res)
    for i in range(cpu_res.size(0)):
        for j in range(cpu_res.size(1)):
            print("%.2f " % cpu_res[i][j], end="")
        print()
    for s in (s1, s2, stream):
        ms.delete_stream(s)
    for t in (ts1, ts2, res, cpu_res):
        ms.free_space(t)
    ms.shutdown_tensor_engine(device)


if __name__ == "__main__":
    main(ms.gpu if cuda.available() and "--cpu" not in sys.argv[1:] else ms.cpu)
