"""mshadow's guide/basic.cpp in Python: tensor views, element-wise expressions and the extensions.

Prints exactly what the C++ program prints (printf("%.2f ") per value, trailing spaces included).
Run: python examples/guide/basic.py
"""
import numpy as np

import mshadow as ms


def printf(fmt, *args):
    print(fmt % args, end="")


def show(t):
    for i in range(t.size(0)):
        for j in range(t.size(1)):
            printf("%.2f ", t[i][j])
        printf("\n")


def main():
    # assume we have a float space
    data = np.zeros(20, dtype=np.float32)
    # create a 2 x 5 x 2 tensor from existing space: a view, no copy
    ts = ms.from_numpy(data.reshape(2, 5, 2))
    # take the first subscript of the tensor: a (5, 2) view sharing data
    mat = ts[0]
    # a Tensor is a handle: mat2 and mat point at the same floats
    mat2 = mat
    # Tensor<cpu, 1>(data, Shape1(10)).FlatTo2D(): mat becomes a (1, 10) view of data[0:10]
    mat = ms.from_numpy(data[:10]).flat_to_2d()
    printf("%u X %u matrix\n", mat.size(0), mat.size(1))

    mat[:] = 0.0
    mat[0][1] = 1.0
    # C++ writes mat[1][0] one row past the end of the (1, 10) view, i.e. data[10], which the
    # rest of the program never reads; Python bounds-checks mat[1], so write data[10] directly.
    data[10] = 2.0
    mat += (mat + 10.0) / 10.0 + 2.0
    # The C++ prints mat2[0][j] for j < 10, reading past mat2's two-wide row: data[0:10],
    # which is exactly row 0 of mat.
    for i in range(mat.size(0)):
        for j in range(mat.size(1)):
            printf("%.2f ", mat[i][j])
        printf("\n")

    lhs = ms.TensorContainer((2, 3))
    rhs = ms.TensorContainer((2, 3))
    ret = ms.TensorContainer((2, 2))
    lhs[:] = 1.0
    rhs[:] = 1.0
    ret[:] = ms.implicit_dot(lhs, rhs.T)
    ms.vector_dot(ret[0].slice(0, 1), lhs[0], rhs[0])
    printf("vdot=%f\n", ret[0][0])
    show(ret)
    printf("\n")

    cnt = 0
    for i in range(lhs.size(0)):
        for j in range(lhs.size(1)):
            lhs[i][j] = cnt
            cnt += 1
            printf("%.2f ", lhs[i][j])
        printf("\n")
    printf("\n")

    index = ms.TensorContainer((2,))
    choosed = ms.TensorContainer((2,))
    index[0] = 1
    index[1] = 2
    choosed[:] = ms.mat_choose_row_element(lhs, index)
    for i in range(choosed.size(0)):
        printf("%.2f ", choosed[i])
    printf("\n")

    recover_lhs = ms.TensorContainer((2, 3))
    small_mat = ms.TensorContainer((2, 3))
    small_mat[:] = -100.0
    recover_lhs[:] = ms.mat_fill_row_element(small_mat, choosed, index)
    for i in range(recover_lhs.size(0)):
        for j in range(recover_lhs.size(1)):
            printf("%.2f ", recover_lhs[i][j] - lhs[i][j])
    printf("\n")

    rhs[:] = ms.one_hot_encode(index, 3)
    show(rhs)
    printf("\n")

    idx = ms.TensorContainer((3,))
    idx[0] = 8
    idx[1] = 0
    idx[2] = 1
    weight = ms.TensorContainer((10, 5))
    embed = ms.TensorContainer((3, 5))
    for i in range(weight.size(0)):
        for j in range(weight.size(1)):
            weight[i][j] = i
    embed[:] = ms.take(idx, weight)
    show(embed)
    printf("\n\n")
    # weight = take_grad(idx, embed, 10): the gradient of take, i.e. embed's rows summed
    # into a zeroed (10, 5) tensor at the rows idx names (AddTakeGrad).
    weight[:] = 0.0
    ms.nn.add_take_grad(weight, idx, embed)
    show(weight)

    printf("upsampling\n")
    small = ms.TensorContainer((2, 2))
    small[0][0] = 1.0
    small[0][1] = 2.0
    small[1][0] = 3.0
    small[1][1] = 4.0
    large = ms.TensorContainer((6, 6))
    large[:] = ms.upsampling_nearest(small, 3)
    show(large)
    small[:] = ms.pool(large, 3, 3, 3, 3, reducer=ms.red.sum, pshape=small.shape)
    show(small)

    printf("mask\n")
    mask_data = ms.TensorContainer((6, 8))
    mask_out = ms.TensorContainer((6, 8))
    mask_src = ms.TensorContainer((6,))
    mask_data[:] = 1.0
    for i in range(6):
        mask_src[i] = float(i)
    mask_out[:] = ms.mask(mask_src, mask_data)
    show(mask_out)


if __name__ == "__main__":
    main()
