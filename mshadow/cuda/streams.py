"""The CUDA side of a gpu ``Stream``: its driver stream and the cuBLAS handle bound to it.

Design:
    ``ms.Stream(ms.gpu)`` (device.py) holds one Queue: a driver Stream made *blocking*, as
    mshadow's ``NewStream<gpu>`` (cudaStreamCreate) makes it, so work queued with no stream
    (the legacy default stream: copies, temporaries, tensors without a stream) stays ordered
    with it, and a cuBLAS handle made on first use and bound to that stream (mshadow makes
    it with the stream when ``create_blas_handle``; here a product on any stream has one).
    The executor asks ``driver_stream(s)`` and ``blas(s)`` for a tensor's ``stream``: None
    is the default stream and its one handle per driver.
    Owns: the queue's lifetime (``close``: wait, then destroy, at ``delete_stream``).
    Never: chooses a stream for the caller; work goes where the destination's stream says.
"""
from ..errors import DeviceError


def _driver():
    from . import driver
    return driver()


class Queue:
    """A gpu Stream's driver stream and its cuBLAS handle (made when first asked for)."""

    __slots__ = ("driver", "stream", "_blas")

    def __init__(self):
        from . import require_device
        require_device("Stream")
        self.driver = _driver()
        self.stream = self.driver.Stream(non_blocking=False)
        self._blas = None

    def blas(self):
        if self._blas is None:
            h = self.driver.BlasHandle()
            h.set_stream(self.stream)
            self._blas = h
        return self._blas

    def close(self):
        """Wait for the queued work, then destroy the handle and the stream."""
        self.stream.synchronize()
        if self._blas is not None:
            self._blas.close()
            self._blas = None
        self.stream.close()


_DEFAULT_BLAS = {}     # driver module name -> its BlasHandle on the default stream


def queue(stream, where):
    """The Queue of a tensor's ``stream`` (None: the default stream, None here), checked: a
    gpu stream, not deleted, of the driver in use."""
    if stream is None:
        return None
    q = getattr(stream, "queue", None)
    if stream.deleted:
        raise DeviceError(f"{where}: the tensor's stream was deleted (delete_stream); "
                          f"set_stream(None) or another stream")
    if q is None:
        raise DeviceError(f"{where}: a gpu tensor has a {stream.device.name} stream; "
                          f"give it a Stream(ms.gpu) or None")
    if q.driver is not _driver():
        raise DeviceError(f"{where}: the tensor's stream belongs to the CUDA driver "
                          f"{q.driver.__name__}, and {_driver().__name__} is in use")
    return q


def driver_stream(stream, where):
    """The driver Stream to queue work of ``stream`` on (None: the default stream)."""
    q = queue(stream, where)
    return None if q is None else q.stream


def blas(stream, where):
    """The cuBLAS handle bound to ``stream`` (None: the default stream's)."""
    q = queue(stream, where)
    if q is not None:
        return q.blas()
    drv = _driver()
    h = _DEFAULT_BLAS.get(drv.__name__)
    if h is None:
        h = _DEFAULT_BLAS[drv.__name__] = drv.BlasHandle()
    return h


def release_default_blas():
    """Close the default stream's cuBLAS handle of the driver in use (shutdown_tensor_engine)."""
    h = _DEFAULT_BLAS.pop(_driver().__name__, None)
    if h is not None:
        h.close()
