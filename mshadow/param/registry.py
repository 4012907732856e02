"""The registry of Parameter classes by name (DMLC_REGISTER_PARAMETER), for tools and lookup.

``@register`` adds a class; ``registry.list()`` names them all, ``registry.get(name)`` finds one.
"""
from ..errors import ParamError


class _Registry:
    """Registered Parameter classes by class name."""

    def __init__(self):
        self._classes = {}

    def add(self, cls):
        from .parameter import Parameter   # here, not at import: parameter.py needs no registry
        if not (isinstance(cls, type) and issubclass(cls, Parameter)):
            raise TypeError(f"register expects a Parameter subclass, got {cls!r}")
        old = self._classes.get(cls.__name__)
        # re-running a module (a notebook cell, importlib.reload) redefines the same class
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ParamError(f"Parameter {cls.__name__} has already been registered "
                             f"(by {old.__module__}.{old.__qualname__})", key=cls.__name__)
        self._classes[cls.__name__] = cls
        return cls

    def list(self):
        """The registered names, sorted."""
        return sorted(self._classes)

    def get(self, name):
        """The class registered as ``name``; KeyError naming the registered ones if none is."""
        try:
            return self._classes[name]
        except KeyError:
            raise KeyError(f"no Parameter registered as {name!r}; registered: {self.list()}") from None

    def __contains__(self, name):
        return name in self._classes

    def __iter__(self):
        return iter(self.list())

    def __len__(self):
        return len(self._classes)


registry = _Registry()


def register(cls):
    """Class decorator: add a Parameter subclass to ``registry`` under its class name."""
    return registry.add(cls)
