"""The emulated device's memory, streams and events (mshadow/cuda/emulate.py): cuMemAllocPitch's
pitch rule as an H100 applies it, cuMemcpy2D's copies of 1-D and 2-D arrays of every layout,
and every use of freed memory or a closed handle refused with the driver's error."""
import re

import numpy as np
import pytest

from mshadow.cuda import emulate
from mshadow.cuda.emulate import Event, Memory, Stream, elapsed_time
from mshadow.errors import CudaError, ShapeError

DTYPES = [np.uint8, np.int8, np.float16, np.int32, np.float32, np.int64, np.float64]


def _status(info, name):
    """The CudaError caught says ``name`` and carries its status."""
    assert name in str(info.value)
    assert info.value.status == emulate._STATUS[name][0]


# ---- allocation ---------------------------------------------------------------------------
@pytest.mark.parametrize("width, pitch", [(1, 512), (100, 512), (512, 512), (513, 1024),
                                          (1000, 1024), (4096, 4096), (5000, 5120)])
@pytest.mark.parametrize("element_bytes", [4, 8, 16])
def test_pitch_is_the_width_rounded_up_to_512(width, pitch, element_bytes):
    # what cuMemAllocPitch gave on an H100 (driver 580) for these widths, whatever the
    # element size: rows a multiple of 512 bytes apart, the first at a 512-byte boundary
    m = Memory.pitched(width, 3, element_bytes)
    assert (m.width, m.height, m.pitch, m.nbytes) == (width, 3, pitch, 3 * pitch)
    assert m.pitch % emulate.PITCH_ALIGNMENT == 0 and m.address % emulate.PITCH_ALIGNMENT == 0
    assert m.device == 0


@pytest.mark.parametrize("nbytes", [1, 3, 255, 256, 1000, 4099])
def test_linear_memory_is_one_row_at_a_256_byte_boundary(nbytes):
    m = Memory(nbytes)
    assert (m.width, m.height, m.pitch, m.nbytes) == (nbytes, 1, nbytes, nbytes)
    assert m.address % emulate.BASE_ALIGNMENT == 0


def test_fresh_memory_holds_garbage_not_zeros():
    # a kernel that reads what nobody wrote sees NaN and -1, not a plausible 0
    m = Memory.pitched(12, 2)
    got = np.zeros((2, 3), np.float32)
    m.copy_to_host(got)
    assert np.isnan(got).all()
    ints = np.zeros(3, np.int32)
    m.copy_to_host(ints)
    assert (ints == -1).all()


@pytest.mark.parametrize("call, name", [
    (lambda: Memory(0), "cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE (invalid argument) [1]"),
    (lambda: Memory(1 << 60), "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"),
    (lambda: Memory.pitched(0, 3), "cuMemAllocPitch failed: CUDA_ERROR_INVALID_VALUE"),
    (lambda: Memory.pitched(4, 0), "cuMemAllocPitch failed: CUDA_ERROR_INVALID_VALUE"),
    (lambda: Memory.pitched(4, 3, 2), "cuMemAllocPitch failed: CUDA_ERROR_INVALID_VALUE"),
    (lambda: Memory(16, device=1), "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE"),
    (lambda: Stream(device=1), "CUDA_ERROR_INVALID_DEVICE"),
    (lambda: emulate.device_attributes(1), "CUDA_ERROR_INVALID_DEVICE")])
def test_bad_allocations_fail_as_the_driver_does(call, name):
    # (each status as an H100 returned it for the same call)
    with pytest.raises(CudaError, match=re.escape(name)):
        call()


def test_device_facts_have_the_real_drivers_keys():
    a = emulate.device_attributes(0)
    assert a["compute_capability"] == (9, 0) and a["multiprocessor_count"] == 132
    assert a["max_grid_dim"] == (2 ** 31 - 1, 65535, 65535)
    assert a["max_block_dim"] == (1024, 1024, 64) and a["max_threads_per_block"] == 1024
    assert a["total_memory"] > 2 ** 28 and a["max_shared_memory_per_block"] == 49152
    assert set(a) == set(emulate.DEVICE) | {"total_memory"}
    assert emulate.device_count() == 1 and emulate.available() is True
    assert emulate.unavailable_reason() is None and emulate.driver_version() >= (11, 0)


# ---- copies -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 7), (5, 129), (17, 3), (2, 513)])
def test_pitched_copies_round_trip_every_dtype_and_odd_size(dtype, rows, cols):
    rng = np.random.default_rng(rows * 1000 + cols)
    a = rng.integers(-100, 100, size=(rows, cols)).astype(dtype)
    isz = np.dtype(dtype).itemsize
    m = Memory.pitched(cols * isz, rows, max(isz, 4))
    m.copy_from_host(a)
    back = np.empty_like(a)
    m.copy_to_host(back)
    assert back.tobytes() == a.tobytes()
    # each row sits at its pitch: the bytes between rows are untouched (still the fill)
    whole = emulate._owner(m.address, m.nbytes)[1].reshape(rows, m.pitch)   # (white box)
    assert whole[:, :cols * isz].tobytes() == a.tobytes()
    assert (whole[:, cols * isz:] == emulate.FILL).all()


def test_sliced_and_1d_host_arrays():
    a = np.arange(5 * 9, dtype=np.float32).reshape(5, 9)
    m = Memory.pitched(9 * 4, 5)
    wide = np.zeros((5, 13), np.float32)
    wide[:, :9] = a
    m.copy_from_host(wide[:, :9])                   # host rows 13 apart, 9 wide
    out = np.full((5, 11), -1.0, np.float32)
    m.copy_to_host(out[:, :9])                       # back into another sliced array
    assert (out[:, :9] == a).all() and (out[:, 9:] == -1).all()
    first = np.zeros(9, np.float32)
    m.copy_to_host(first)                            # a 1-D array: the first row
    assert (first == a[0]).all()
    m.copy_from_host(np.arange(4, dtype=np.float32))   # a shorter row: its first bytes only
    m.copy_to_host(out[:, :9])
    assert (out[0, :4] == np.arange(4)).all() and (out[0, 4:9] == a[0, 4:]).all()


def test_linear_memory_takes_any_contiguous_array_as_one_row():
    a = np.arange(24, dtype=np.int64).reshape(2, 12)
    m = Memory(a.nbytes)
    m.copy_from_host(a)
    back = np.zeros((6, 4), np.int64)
    m.copy_to_host(back)
    assert (back.ravel() == a.ravel()).all()


def test_copies_that_do_not_fit_or_cannot_be_written():
    m = Memory.pitched(8 * 4, 3)
    with pytest.raises(ShapeError, match="do not fit"):
        m.copy_from_host(np.zeros((4, 8), np.float32))      # a row too many
    with pytest.raises(ShapeError, match="do not fit"):
        m.copy_from_host(np.zeros((3, 9), np.float32))      # a row too wide
    with pytest.raises(ShapeError, match="contiguous rows"):
        m.copy_from_host(np.zeros((3, 8), np.float32)[:, ::2])
    ro = np.zeros((3, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        m.copy_to_host(ro)
    with pytest.raises(TypeError, match="numpy array"):
        m.copy_from_host([1.0, 2.0])


# ---- freed memory -------------------------------------------------------------------------
def test_freed_memory_is_never_touched():
    m = Memory.pitched(64, 2)
    assert m.address != 0
    m.free()
    m.free()                                         # a second call does nothing
    assert m.address == 0 and "freed" in repr(m)
    for call in (lambda: m.copy_from_host(np.zeros(4, np.float32)),
                 lambda: m.copy_to_host(np.zeros(4, np.float32))):
        with pytest.raises(CudaError, match="the device memory was freed") as info:
            call()
        _status(info, "CUDA_ERROR_INVALID_VALUE")


def test_the_registry_forgets_freed_and_collected_memory():
    a, b = Memory(64), Memory(64)
    addr_a, addr_b = a.address, b.address
    assert emulate._owner(addr_a + 63)[0] is a and emulate._owner(addr_a + 60, 8) is None
    a.free()
    del b
    assert emulate._owner(addr_a) is None and emulate._owner(addr_b) is None


# ---- streams and events -------------------------------------------------------------------
def test_streams_run_work_at_once_in_order():
    s = Stream()
    m = Memory(16)
    m.copy_from_host(np.arange(4, dtype=np.float32), s)
    assert s.query() and s.address != 0 and s.device == 0
    s.synchronize()
    got = np.zeros(4, np.float32)
    m.copy_to_host(got, s)
    assert (got == np.arange(4)).all()
    e = Event()
    e.record(s)
    other = Stream(non_blocking=False)
    other.wait_event(e)
    assert e.query() and other.query()
    s.close()
    s.close()                                        # a second call does nothing
    assert s.address == 0


@pytest.mark.parametrize("use", ["synchronize", "query", "wait_event", "copy", "record"])
def test_a_closed_stream_is_refused(use):
    s = Stream()
    s.close()
    call = {"synchronize": s.synchronize, "query": s.query,
            "wait_event": lambda: s.wait_event(Event()),
            "copy": lambda: Memory(4).copy_from_host(np.zeros(1, np.float32), s),
            "record": lambda: Event().record(s)}[use]
    with pytest.raises(CudaError, match="the stream was closed") as info:
        call()
    _status(info, "CUDA_ERROR_INVALID_HANDLE")


def test_streams_and_events_take_only_their_own_types():
    with pytest.raises(TypeError, match="expected mshadow.cuda.emulate.Stream"):
        Memory(4).copy_from_host(np.zeros(1, np.float32), stream="default")
    with pytest.raises(TypeError, match="expected mshadow.cuda.emulate.Event"):
        Stream().wait_event(None)
    with pytest.raises(TypeError, match="expected mshadow.cuda.emulate.Event"):
        elapsed_time(Event(), 3)


def test_elapsed_time_between_recorded_timing_events():
    start, end = Event(), Event()
    start.record()
    end.record(Stream())
    end.synchronize()
    assert elapsed_time(start, end) >= 0
    for bad, why in ((Event(timing=False), "timing=False"), (Event(), "never recorded")):
        if why == "timing=False":
            bad.record()
        with pytest.raises(CudaError, match=why) as info:
            elapsed_time(start, bad)
        _status(info, "CUDA_ERROR_INVALID_HANDLE")
    end.close()
    with pytest.raises(CudaError, match="the event was closed"):
        elapsed_time(start, end)
    with pytest.raises(CudaError, match="the event was closed"):
        end.record()

