# cython: language_level=3, cdivision=True
"""The compiled core: tensors over aligned pitched memory and the Plan evaluation loops.

Design: a Tensor is a thin handle (allocation, byte offset, shape, row stride); an
Allocation owns the bytes and is the single place that knows whether they are still valid,
so a freed tensor or any view of it raises instead of touching freed memory.
"""
import functools
import threading

import numpy as np
from .errors import ShapeError, DTypeError, DeviceError, BuildMismatchError
from .device import cpu as _CPU_DEV
from .dtypes import type_flag as _type_flag

include "_exp.pxi"
include "_tensor.pxi"
include "_copy.pxi"
include "_engine.pxi"
include "_view.pxi"
include "_gather.pxi"
include "_stages.pxi"
