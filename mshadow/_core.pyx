# cython: language_level=3, cdivision=True
"""The compiled core: tensors over aligned pitched memory and the Plan evaluation loops.

Design: a Tensor is a thin handle (allocation, byte offset, shape, row stride); an
Allocation owns the bytes and is the single place that knows whether they are still valid,
so a freed tensor or any view of it raises instead of touching freed memory.
"""
import functools
import os
import threading

import numpy as np
from .errors import ShapeError, DTypeError, DeviceError, BuildMismatchError, IntegerArgumentError
from .device import cpu as _CPU_DEV
from .dtypes import type_flag as _type_flag
from mshadow._tables cimport *


def _check_tables():
    """The dtype and reducer tables the binary was built with (dtypes_gen.h) are the Python
    tables (dtypes.DTYPES, readers.REDUCER_IDS): else every type switch would be wrong."""
    from .dtypes import DTYPES
    from .readers import REDUCER_IDS
    cdef int k = 0
    built = []
    while ms_dtype_table[k].code != NULL:
        r = ms_dtype_table[k]
        built.append((r.flag, r.code.decode(), r.name.decode(), r.size, bool(r.is_float)))
        k += 1
    want = [(d.flag, d.code, d.np.name, d.size, d.is_float) for d in DTYPES]
    k = 0
    reducers = {}
    while ms_reducer_table[k].name != NULL:
        reducers[ms_reducer_table[k].name.decode()] = ms_reducer_table[k].id
        k += 1
    if built != want or reducers != REDUCER_IDS:
        raise BuildMismatchError(
            f"mshadow's compiled core was built with other dtype or reducer tables "
            f"(dtypes_gen.h: {built}, {reducers}) than the ones in {os.path.dirname(__file__)} "
            f"(dtypes.py, readers.py: {want}, {REDUCER_IDS}): rebuild the extension "
            f"(pip install -e . or python setup.py build_ext --inplace)")


_check_tables()

include "_exp.pxi"
include "_tensor.pxi"
include "_copy.pxi"
include "_dlpack.pxi"
include "_engine.pxi"
include "_view.pxi"
include "_product.pxi"
include "_gather.pxi"
include "_stages.pxi"
include "_reduce.pxi"
include "_nn.pxi"
