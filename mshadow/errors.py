"""The one exception hierarchy of mshadow.

The library's own errors (shapes, dtypes, devices, freed tensors, lazy expressions, CUDA,
parameters) are MShadowErrors, each subclass also the built-in exception a Python user would
expect (pyarrow's pattern), so ``except ValueError`` works. Where Python or numpy has the
exact error already, that is raised as it is: ValueError for a read-only destination or a
numpy layout a tensor cannot view, IndexError for an index out of range, BufferError for
memory that exports keep alive, OverflowError for an integer scalar its dtype cannot hold,
TypeError for an operand of no tensor type.
"""


class MShadowError(Exception):
    """Base class of every error raised by mshadow."""


class ShapeError(MShadowError, ValueError):
    """Shapes do not agree (operands of an expression, destination of an assignment)."""


class DTypeError(MShadowError, TypeError):
    """A dtype that is not supported, or dtypes mixed without tcast."""


class DeviceError(MShadowError, ValueError):
    """Tensors of different devices meet, or a device is not available."""


class LazyExpressionError(MShadowError, TypeError):
    """A lazy expression was used as if it held values (``y[0]``, ``float(y)``,
    ``np.asarray(y)`` after ``y = a + b``): an expression computes nothing until it is
    assigned into a tensor with ``[:]``; the message shows how."""


class MissingMethodError(MShadowError, AttributeError):
    """A method that Tensor and expressions do not have: numpy's ``t.sum()``,
    ``t.reshape()``, ... (the message names the mshadow function to call instead), or a
    tensor's ``.numpy()`` asked of a lazy expression that was never assigned."""


class OperatorError(MShadowError, ValueError, TypeError):
    """What was given as an operator is not one: an unknown name, a numpy ufunc
    (``ms.F(np.exp, x)``) or an undecorated Python function; the message names the
    ``ms.op`` operator or ``@ms.op.define`` to use."""


class IntegerArgumentError(MShadowError, TypeError):
    """A size, stride, index, bound or axis that must be an integer got another type (a
    float bound such as ``slice_axis(t, 0, 0.5, 2)``); out-of-range integers are a
    ShapeError."""


class FreedTensorError(MShadowError, RuntimeError):
    """A tensor (or a view of one) is used after its memory was released."""


class FormatError(MShadowError, ValueError):
    """A file or byte stream is truncated or corrupt."""


class CudaError(MShadowError, RuntimeError):
    """A CUDA driver, NVRTC or cuBLAS call failed; ``status`` holds the raw code."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class ParamError(MShadowError, ValueError):
    """A Parameter value failed to parse or validate; ``key`` and ``value`` say which."""

    def __init__(self, message, key=None, value=None):
        super().__init__(message)
        self.key = key
        self.value = value


class BuildMismatchError(MShadowError, ImportError):
    """The compiled core was built from other sources than the installed Python files."""


class PSError(MShadowError, RuntimeError):
    """The parameter server (mshadow.ps) cannot go on: a peer rank died or stopped answering
    within the timeout, or an MPI call failed. The model on this rank was not half-updated."""


class UnsupportedNodeError(MShadowError, NotImplementedError):
    """A backend's lowering met an IR node it does not lower yet (the CUDA emitter and a
    View, Gather or reduction); ``node`` is the node."""

    def __init__(self, message, node=None):
        super().__init__(message)
        self.node = node


class UntracedOperatorError(MShadowError, TypeError):
    """A defined operator whose body could not be traced has no compiled form: it runs on
    numpy on the CPU, and cannot run on a GPU; ``op`` is the operator."""

    def __init__(self, message, op=None):
        super().__init__(message)
        self.op = op
