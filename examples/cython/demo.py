"""Run the kernels of mshadow_kernels.pyx on mshadow tensors (build them first, see setup.py)."""
import numpy as np

import mshadow as ms
import mshadow_kernels as k

x = ms.new_tensor((3, 5), pad=True)       # padded rows: stride 16 elements
y = ms.new_tensor((3, 5), init=1.0, pad=True)
x.numpy()[...] = np.arange(15, dtype=np.float32).reshape(3, 5)
k.saxpy(2.0, x, y)                        # y = 2 * x + 1, through cimport mshadow
print(y.numpy())
print(k.row_sums(y))                      # a float[:, :] memoryview takes the padded tensor
try:
    k.scale_rows(y, 0.5)                  # float[:, ::1] refuses padded rows
except BufferError as e:
    print("BufferError:", e)
z = ms.new_tensor((3, 5), init=4.0)       # pad=False: contiguous
k.scale_rows(z, 0.5)
print(z.numpy()[0])
