"""Device tags (``cpu``, ``gpu``) and the CPU Stream.

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
    """``Stream<cpu>``: work on the CPU is synchronous, so wait() returns at once."""

    def __init__(self, device=cpu):
        device = as_device(device)
        if device is not cpu:
            raise DeviceError("GPU streams need the CUDA backend (mshadow.cuda), "
                              "which is not available in this build")
        self.device = device
        self.deleted = False

    def wait(self):
        """Block until all work on the stream is done (a no-op on the CPU)."""

    def check_idle(self):
        """True when no work is pending (always on the CPU) (``CheckIdle``)."""
        return True

    def __repr__(self):
        return f"Stream({self.device!r})"

    Wait = wait
    CheckIdle = check_idle


def new_stream(device=cpu, create_blas_handle=True, create_dnn_handle=False, dev_id=-1):
    """``NewStream<Device>``: a stream on ``device`` (the handle flags are accepted for compatibility)."""
    return Stream(device)


def delete_stream(stream):
    """``DeleteStream``: the stream must not be used afterwards (CPU streams hold nothing)."""
    if not isinstance(stream, Stream):
        raise TypeError(f"delete_stream expects a Stream, got {stream!r}")
    stream.deleted = True
