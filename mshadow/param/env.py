"""dmlc::GetEnv / SetEnv / UnsetEnv: environment variables read and written with a field's rules.

The type comes from ``type=`` or from the default's Python type (a Python float is a C double).
"""
import os

from .fields import Field

_FROM_PYTHON = {bool: bool, int: int, float: "double", str: str}


def _entry(key, type, example):
    if type is None:
        type = _FROM_PYTHON.get(example.__class__, example.__class__)
    f = Field(type)
    f.name = key   # messages name the variable, as dmlc's FieldEntry does
    return f


def get_env(key, default, type=None):
    """The variable parsed as ``type``; ``default`` when it is unset or empty.

    ``get_env("X", 1)`` with ``X=4x`` raises ParamError
    ``Invalid Parameter format for X expect int but value='4x'``.
    """
    text = os.environ.get(key)
    if not text:
        return default
    return _entry(key, type, default).read(text)


def set_env(key, value, type=None):
    """Set the variable to the value as the field prints it (``set_env("X", 0.1, "float")``
    gives ``0.100000001``)."""
    f = _entry(key, type, value)
    os.environ[key] = f.format_value(f.read(value))


def unset_env(key):
    """Remove the variable if it is set."""
    os.environ.pop(key, None)
