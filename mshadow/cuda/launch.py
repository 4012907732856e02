"""Launch configurations of the emitted kernels (mshadow/cuda/lower.py): grids and blocks that
never exceed the device's limits, and the run-time extents a reduction kernel takes.

Every emitted kernel walks its range with grid-stride loops, so a smaller grid covers any
range: a launch caps each grid dimension at the device's maximum (mshadow's CUDA launches
failed with "too large launch parameter" past 65535 rows, its users' third complaint) and
at the blocks that keep the device busy, never more. Pure functions of the sizes and the
device's limits: tested without a GPU.
"""
from collections import namedtuple

from .lower import REDUCE_BLOCK

__all__ = ["Limits", "Launch", "H100", "elementwise", "reduction", "reduce_geometry",
           "softmax", "flat", "tiles"]

# The device attributes a launch reads (cuDeviceGetAttribute): the largest grid in x and y,
# threads a block, and the multiprocessors whose count sets how many blocks keep it busy.
Limits = namedtuple("Limits", "max_grid_x max_grid_y max_block sm_count")
Launch = namedtuple("Launch", "grid block")

H100 = Limits(2 ** 31 - 1, 65535, 1024, 132)
BLOCKS_PER_SM = 8          # resident blocks a multiprocessor holds, enough to hide latency
ELEMENTWISE_BLOCK = 256    # threads of an element-wise block (x: along a row)
# An element-wise grid holds at most this many waves of resident blocks; its stride loops walk
# the rest. On an H200 a hand-written E1 kernel over 2**27 floats ran in 0.443 ms with 4224
# blocks (4 waves) and 0.557 ms with one thread an element (524288 blocks).
ELEMENTWISE_WAVES = 4


def _cap(n, most):
    return max(1, min(int(n), int(most)))


def elementwise(rows, cols, limits=H100):
    """The launch of an element-wise or gather kernel (lower.emit) over rows x cols:
    blockIdx.y walks rows, blockIdx.x * blockDim.x + threadIdx.x columns."""
    block = _cap(min(ELEMENTWISE_BLOCK, limits.max_block), -(-max(cols, 1) // 32) * 32)
    most = limits.sm_count * BLOCKS_PER_SM * ELEMENTWISE_WAVES    # the grid's blocks at most
    gx = _cap(min(-(-max(cols, 1) // block), most), limits.max_grid_x)
    gy = _cap(min(rows, max(1, most // gx)), limits.max_grid_y)
    return Launch((gx, gy, 1), (block, 1, 1))


def reduce_geometry(shape, form, axis):
    """(nout, nred, A, B, M, except_dim) of lower.emit_reduce for a source of ``shape``: the
    source as (A, B, M) around ``axis`` (B = shape[axis]); except_dim keeps it (nout = B,
    folding A * M each), the other forms reduce it (nout = A * M, folding B)."""
    A = 1
    for n in shape[:axis]:
        A *= int(n)
    M = 1
    for n in shape[axis + 1:]:
        M *= int(n)
    B = int(shape[axis])
    if form == "except_dim":
        return B, A * M, A, B, M, 1
    return A * M, B, A, B, M, 0


def reduction(nout, nred, limits=H100):
    """The launch of a reduction kernel: a block an output element (a grid-stride loop over
    outputs), as many warps as the folded length uses, at most REDUCE_BLOCK threads."""
    warps = _cap(-(-max(nred, 1) // 32), min(REDUCE_BLOCK, limits.max_block) // 32)
    return Launch((_cap(min(nout, limits.sm_count * BLOCKS_PER_SM * 4), limits.max_grid_x),
                   1, 1), (32 * warps, 1, 1))


def softmax(rows, limits=H100):
    """The launch of lower.emit_softmax: a block of 32 threads a row."""
    return Launch((_cap(min(rows, limits.sm_count * BLOCKS_PER_SM * 8), limits.max_grid_x),
                   1, 1), (32, 1, 1))


def flat(n, limits=H100):
    """The launch of a kernel walking n elements with one 1-D grid-stride loop, a thread an
    element (lower.emit_random, emit_softmax_grad, emit_softmax_axis1)."""
    block = min(ELEMENTWISE_BLOCK, limits.max_block)
    return Launch((_cap(min(-(-max(n, 1) // block), limits.sm_count * BLOCKS_PER_SM * 4),
                        limits.max_grid_x), 1, 1), (block, 1, 1))


def tiles(n, block, limits=H100):
    """The launch of a kernel taking a tile of ``block`` elements a block (a grid-stride loop
    over the n tiles: lower.emit_sort_count, emit_sort_scatter)."""
    return Launch((_cap(min(n, limits.sm_count * BLOCKS_PER_SM * 4), limits.max_grid_x), 1, 1),
                  (min(block, limits.max_block), 1, 1))
