"""mshadow.param: dmlc-core's Parameter system, declared with Python descriptors.

Declare a struct once and get parsing from strings, validation, defaults, docs and JSON.
"""
from ..errors import ParamError
from .env import get_env, set_env, unset_env
from .fields import Field, ParamFieldInfo, alias, field
from .parameter import Parameter, ParamInitOption
from .registry import register, registry

__all__ = ["Parameter", "field", "alias", "Field", "ParamError", "ParamInitOption", "ParamFieldInfo",
           "register", "registry", "get_env", "set_env", "unset_env"]
