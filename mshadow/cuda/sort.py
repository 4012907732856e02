"""nn.sort_by_key and nn.vectorized_sort of gpu tensors: a stable LSD radix sort on the device.

Design:
    nn.py checks the arguments, then hands 1-D gpu tensors here. Each key becomes 64-bit
    order bits (lower.emit_sort_keys: NaN last, -0 as +0, complemented for a descending
    sort), read through the permutation so far; then a pass per SORT_DIGIT bits of the key
    (lower.sort_passes): the digit counts of each tile, their exclusive scan (digit-major, so
    the tiles of a digit keep their order: a chunk's sums, their scan, each chunk's scan
    from its offset, over the whole device), and the stable move of every key and its
    permutation entry (emit_sort_count, emit_sort_scan, emit_sort_scatter). Stable passes
    from the last key to the first give a lexicographic order (vectorized_sort: by segment,
    then by value). The tensors are then gathered through the permutation from copies of
    both taken first, the first completely before the second, as nn.py writes them (so
    keys may alias values).
    Everything runs on the first tensor's stream; nothing is read back to the host.
"""
import numpy as np

from .. import _core
from ..dtypes import CODE_BY_FLAG
from . import launch, lower
from .executor import _driver, _facts, _kernel, _run, temporary


def _int64(n, stream):
    return temporary((n,), np.int64, stream, pad=False)


def _permutation(keys, descending, stream):
    """The stable sorting permutation (an int64 gpu tensor) of the 1-D gpu tensors ``keys``
    taken lexicographically, the last one first."""
    n = keys[0].shape[0]
    limits = _facts(_driver())[0]
    tiles = -(-n // lower.SORT_TILE)
    uk, uk2, perm, perm2 = (_int64(n, stream) for _ in range(4))
    m = (1 << lower.SORT_DIGIT) * tiles
    chunks = -(-m // lower.SORT_SCAN_CHUNK)
    counts, part = _int64(m, stream), _int64(chunks, stream)
    count = _kernel(("sort_count",), lower.emit_sort_count)
    scan = _kernel(("sort_scan",), lower.emit_sort_scan)
    scatter = _kernel(("sort_scatter",), lower.emit_sort_scatter)
    flat, by_tile = launch.flat(n, limits), launch.tiles(tiles, lower.SORT_TILE, limits)
    scan_block = min(256, lower.SORT_SCAN_BLOCK, limits.max_block)
    by_chunk = launch.tiles(chunks, scan_block, limits)
    one_block = launch.Launch((1, 1, 1), (scan_block, 1, 1))
    # the counts' exclusive scan: each chunk's sum, the sums' scan (one chunk), each chunk's
    # scan from its offset
    over_counts, over_part = {"counts": counts, "part": part}, {"counts": part, "part": part}
    scans = ((by_chunk, dict(m=m, chunk=lower.SORT_SCAN_CHUNK, total=1, based=0), over_counts),
             (one_block, dict(m=chunks, chunk=chunks, total=0, based=0), over_part),
             (by_chunk, dict(m=m, chunk=lower.SORT_SCAN_CHUNK, total=0, based=1), over_counts))
    for j, key in enumerate(reversed(keys)):
        code = CODE_BY_FLAG[key.type_flag]
        order = _kernel(("sort_keys", code, descending),
                        lambda: lower.emit_sort_keys(code, descending))
        _run(order, flat, {"n": n, "first": int(j == 0)},
             {"keys": key, "ukeys": uk, "perm": perm}, stream)
        for p in range(lower.sort_passes(code)):
            shift = {"n": n, "tiles": tiles, "shift": p * lower.SORT_DIGIT}
            _run(count, by_tile, shift, {"ukeys": uk, "counts": counts}, stream)
            for geo, named, tensors in scans:
                _run(scan, geo, named, tensors, stream)
            _run(scatter, by_tile, shift, {"ukeys": uk, "perm": perm, "ukeys_out": uk2,
                                           "perm_out": perm2, "offsets": counts}, stream)
            uk, uk2, perm, perm2 = uk2, uk, perm2, perm
    return perm


def _gather(tensors, perm, stream):
    """Each of ``tensors`` t[i] = (t as it was before any was written)[perm[i]], one after
    another (nn.py's sk, sv = k[idx], v[idx]; then k, then v)."""
    copies = []
    for t in tensors:
        src = temporary(t.shape, t.dtype, stream, pad=False)
        _core.copy(src, t, stream)
        copies.append(src)
    for t, src in zip(tensors, copies):
        code = CODE_BY_FLAG[t.type_flag]
        k = _kernel(("gather_1d", code), lambda: lower.emit_gather_1d(code))
        _run(k, launch.flat(t.shape[0], _facts(_driver())[0]), {"n": t.shape[0]},
             {"perm": perm, "src": src, "dst": t}, stream)


def sort_by_key(keys, values, is_ascend):
    """nn.sort_by_key of 1-D gpu tensors (checked by nn.py): keys sorted stably in place,
    values permuted along."""
    if keys.shape[0] == 0:
        return
    _gather((keys, values), _permutation([keys], not is_ascend, keys.stream), keys.stream)


def vectorized_sort(values, segments):
    """nn.vectorized_sort of 1-D gpu tensors: by segment, then value, stably."""
    if values.shape[0] == 0:
        return
    _gather((values, segments), _permutation([segments, values], False, values.stream),
            values.stream)
