"""Device tags (``cpu``, ``gpu``) and Stream.

A device tag is the Python form of mshadow's ``struct cpu { kDevCPU, kDevMask }``.
"""
from .errors import DeviceError


class Device:
    """A device tag; compare with ``is`` or ``==``."""

    __slots__ = ("name", "kDevCPU", "kDevMask")

    def __init__(self, name, dev_cpu, dev_mask):
        self.name = name
        self.kDevCPU = dev_cpu
        self.kDevMask = dev_mask

    def __repr__(self):
        return f"mshadow.{self.name}"

    def __reduce__(self):
        return (as_device, (self.name,))


cpu = Device("cpu", True, 1)
gpu = Device("gpu", False, 2)


def as_device(device):
    """``cpu`` or ``gpu`` from a device, its name or its dev_mask; else DeviceError."""
    if device is cpu or device is gpu:
        return device
    if device in ("cpu", 1):
        return cpu
    if device in ("gpu", "cuda", 2):
        return gpu
    raise DeviceError(f"unknown device {device!r} (expected mshadow.cpu or mshadow.gpu)")


def check_devices(where, dst=None, srcs=(), gpu_ok=False):
    """The device check, made here only: the destination's device ``dst`` (None when there
    is none) and every operand's in ``srcs`` must be one device (a DeviceError names them),
    and one that ``where`` evaluates on: the CPU, or the GPU where the caller runs it there
    (``gpu_ok``: allocation, copies, assignments, reductions and products, mshadow/cuda/)."""
    if dst is None or dst is cpu:                # the common case, without building sets
        for d in srcs:
            if d is not cpu:
                break
        else:
            return
    devices = set(srcs) | ({dst} if dst is not None else set())
    if len(devices) > 1:
        names = ", ".join(sorted(d.name for d in set(srcs)))
        got = (f"the destination on {dst.name}, operands on {names}" if dst is not None
               else f"operands on {names}")
        raise DeviceError(f"{where}: tensors of different devices ({got}); use ms.copy "
                          f"between devices")
    device = devices.pop() if devices else cpu
    if device is not cpu and not gpu_ok:
        raise DeviceError(f"{where}: {device.name} tensors need the CUDA backend to run this, "
                          f"and it does not yet (docs/gpu.md lists what runs on the GPU); copy "
                          f"them to the cpu with ms.copy for this")


class Stream:
    """``Stream<cpu>`` or ``Stream<gpu>``: where a tensor's work is queued.

    On the CPU work is synchronous, so wait() returns at once. A gpu stream is a CUDA stream
    (mshadow/cuda/streams.py) with its own cuBLAS handle bound to it: expressions, products
    and copies into a tensor whose ``stream`` it is are queued on it, asynchronously, and
    wait() blocks until they are done. It is a blocking stream, as mshadow's: work queued
    with no stream (the default stream) waits for it and it for that.
    """

    def __init__(self, device=cpu):
        device = as_device(device)
        self.device = device
        self.deleted = False
        self.queue = None
        if device is not cpu:
            from .cuda.streams import Queue
            self.queue = Queue()

    def wait(self):
        """Block until all work on the stream is done (a no-op on the CPU)."""
        if self.queue is not None:
            self._live("wait").stream.synchronize()

    def check_idle(self):
        """True when no work is pending (always on the CPU) (``CheckIdle``)."""
        return self.queue is None or self._live("check_idle").stream.query()

    def _live(self, where):
        if self.deleted:
            raise DeviceError(f"Stream.{where}: the stream was deleted (delete_stream)")
        return self.queue

    def __repr__(self):
        return f"Stream({self.device!r}{', deleted' if self.deleted else ''})"

    Wait = wait
    CheckIdle = check_idle


def new_stream(device=cpu, create_blas_handle=True, create_dnn_handle=False, dev_id=-1):
    """``NewStream<Device>``: a stream on ``device``. The flags are accepted for
    compatibility: a gpu stream makes its cuBLAS handle when a product first needs it, and
    there is no cuDNN; ``dev_id`` -1 or 0 (one device)."""
    if dev_id not in (-1, 0):
        raise DeviceError(f"new_stream: dev_id {dev_id!r}: mshadow for Python drives one "
                          f"device (0); expected -1 or 0")
    return Stream(device)


def delete_stream(stream):
    """``DeleteStream``: waits for the stream's work, then frees it (a gpu stream's CUDA
    stream and cuBLAS handle); using it afterwards raises DeviceError, deleting it again
    does nothing."""
    if not isinstance(stream, Stream):
        raise TypeError(f"delete_stream expects a Stream, got {stream!r}")
    if stream.queue is not None and not stream.deleted:
        stream.queue.close()
    stream.deleted = True


def _gpu_ordinal(where, dev_id):
    """``dev_id`` checked for the GPU: 0 (mshadow for Python drives one device), present."""
    from .cuda import driver
    from .cuda import require_device
    require_device(where)
    count = driver().device_count()
    if dev_id != 0:
        raise DeviceError(f"{where}: dev_id {dev_id!r}: mshadow for Python drives one device "
                          f"(0); this machine has {count}")
    return dev_id


def init_tensor_engine(device=cpu, dev_id=0):
    """``InitTensorEngine<Device>(dev_id)``: nothing on the CPU; on the GPU it opens the
    driver and checks the device is there (DeviceError saying why when it is not). Work on
    the GPU does not need it: the first gpu tensor opens the driver too."""
    if as_device(device) is gpu:
        from .cuda import driver
        _gpu_ordinal("init_tensor_engine", dev_id)
        driver().synchronize(dev_id)            # makes the device's context current


def shutdown_tensor_engine(device=cpu):
    """``ShutdownTensorEngine<Device>``: on the GPU, waits for all queued work and releases
    the default stream's cuBLAS handle (a later product makes another)."""
    if as_device(device) is gpu:
        from .cuda import driver, streams
        from .cuda import require_device
        require_device("shutdown_tensor_engine")
        driver().synchronize()
        streams.release_default_blas()


def set_device(dev_id, device=gpu):
    """``SetDevice<Device>(dev_id)``: the device later work runs on (0: one device)."""
    if as_device(device) is gpu:
        _gpu_ordinal("set_device", dev_id)
