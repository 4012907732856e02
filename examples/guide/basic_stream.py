"""Tensors on streams: mshadow's guide/basic_stream.cu in Python.

The C++ puts two (2, 5) GPU tensors on their own streams, fills them with 1 and 2 (the two
fills may overlap), and computes dot(ts1, ts2.T()) on a third stream. This build runs on the
CPU, where a Stream is synchronous, so the program shows the same API and prints the same
result: each entry is 5 * (1 * 2) = 10.
Run: python examples/guide/basic_stream.py
"""
import mshadow as ms


def main():
    ts1 = ms.new_tensor((2, 5), 0.0)
    ts2 = ms.new_tensor((2, 5), 0.0)
    ts1.set_stream(ms.new_stream(ms.cpu))
    ts2.set_stream(ms.new_stream(ms.cpu))
    ts1[:] = 1     # on ts1's stream
    ts2[:] = 2     # on ts2's stream; on a GPU it could run beside the fill above
    res = ms.new_tensor((2, 2), 0.0)
    stream = ms.new_stream(ms.cpu)
    res.set_stream(stream)
    res[:] = ms.dot(ts1, ts2.T)   # on res's stream
    stream.wait()

    cpu_res = ms.new_tensor((2, 2), 0.0)
    ms.copy(cpu_res, res)
    for i in range(cpu_res.size(0)):
        for j in range(cpu_res.size(1)):
            print("%.2f " % cpu_res[i][j], end="")
        print()
    for t in (ts1, ts2, res, cpu_res):
        ms.free_space(t)


if __name__ == "__main__":
    main()
