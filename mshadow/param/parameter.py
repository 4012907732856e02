"""The Parameter base class: dmlc::Parameter<PType>'s Init/Update, __DICT__, __FIELDS__, __DOC__, JSON.

Subclasses declare fields in the class body; __init_subclass__ collects them in declaration
order (dmlc's ParamManager), resolves aliases and generates the signature and docstring.
"""
import enum
import inspect
import json
import math
import sys
from collections.abc import Mapping

from ..errors import ParamError
from .fields import Alias, Field


class ParamInitOption(enum.IntEnum):
    """What Init does with a key no field or alias has (dmlc's values)."""
    kAllowUnknown = 0   # ignore it
    kAllMatch = 1       # raise ParamError
    kAllowHidden = 2    # ignore __hidden__ keys (length > 4, '__' at both ends), raise otherwise


def _pairs(kwargs):
    """Init accepts a mapping or (key, value) pairs, processed in order: later keys win."""
    if isinstance(kwargs, Mapping):
        return list(kwargs.items())
    if isinstance(kwargs, (str, bytes)) or not hasattr(kwargs, "__iter__"):
        raise TypeError(f"Parameter.init: expected a dict or (key, value) pairs, got "
                        f"{type(kwargs).__name__} {kwargs!r:.60}")
    pairs = [tuple(kv) if hasattr(kv, "__iter__") and not isinstance(kv, (str, bytes)) else kv
             for kv in kwargs]
    for kv in pairs:
        if not (isinstance(kv, tuple) and len(kv) == 2):
            raise TypeError(f"Parameter.init: expected (key, value) pairs, got {kv!r:.60}")
    return pairs


def _is_hidden(key):
    return len(key) > 4 and key.startswith("__") and key.endswith("__")


def _same(a, b):
    # parameters compare by value, and a NaN setting equals itself
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _json_string(text):
    """dmlc::JSONWriter::WriteString: escapes only \\r \\n \\\\ \\t and \"."""
    table = {"\r": "\\r", "\n": "\\n", "\\": "\\\\", "\t": "\\t", '"': '\\"'}
    return '"' + "".join(table.get(c, c) for c in text) + '"'


def _annotation(cls, name):
    """The annotation of ``name`` in cls's body; a string one (PEP 563) is resolved by name."""
    ann = cls.__dict__.get("__annotations__", {}).get(name)
    if isinstance(ann, str):
        ann = ann.strip("'\"")
        try:
            return eval(ann, vars(sys.modules[cls.__module__]), dict(vars(cls)))   # noqa: S307
        except Exception:
            return ann   # maybe a dmlc type string such as "double"; kind_of decides
    return ann


class Parameter:
    """Base of declared parameter structs (``dmlc::Parameter<PType>``).

    ``MyParam()`` holds the defaults and leaves required fields unset until :meth:`init`;
    ``MyParam(key=value, ...)`` is ``init`` with every key required to match.
    """

    _fields = {}   # name -> Field, declaration order (dmlc's entry_)
    _keys = {}     # name or alias -> Field (dmlc's entry_map_)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fields, keys = {}, {}
        for base in cls.__bases__:
            fields.update(getattr(base, "_fields", {}))
            keys.update(getattr(base, "_keys", {}))
        own = vars(cls)
        for name, attr in own.items():
            if isinstance(attr, Field):
                if name in keys:
                    raise ParamError(f"key {name} has already been registered in {cls.__name__}", key=name)
                if hasattr(Parameter, name):
                    raise TypeError(f"{cls.__name__}.{name}: a field may not hide Parameter.{name}")
                attr._bind(cls.__name__, name, _annotation(cls, name))
                fields[name] = keys[name] = attr
        # aliases after every field, so one may be written before its field
        for name, attr in own.items():
            if isinstance(attr, Alias):
                target = keys.get(attr.target)
                if target is None:
                    raise ParamError(f"key {attr.target} has not been registered in {cls.__name__}",
                                     key=attr.target)
                if name in keys:
                    raise ParamError(f"Alias {name} has already been registered in {cls.__name__}",
                                     key=name)
                attr.field = keys[name] = target
        cls._fields, cls._keys = fields, keys
        cls.__signature__ = inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=f.annotation,
                              default=f.python_default() if f.has_default else inspect.Parameter.empty)
            for name, f in fields.items()])
        head = (cls.__doc__ or cls.__name__).rstrip()
        cls.__doc__ = f"{head}\n\nParameters\n----------\n{cls.doc()}"

    def __init__(self, **kwargs):
        if kwargs:
            self.init(kwargs, ParamInitOption.kAllMatch)
        else:
            for name, f in self._fields.items():
                if f.has_default:
                    self.__dict__[name] = f.fresh_default()

    # ---- dmlc's Init / InitAllowUnknown / UpdateAllowUnknown ----------------------------
    def init(self, kwargs, /, option=ParamInitOption.kAllowHidden):
        """Set every field: given keys are parsed and checked, the others take their default.

        Values may be text (parsed with dmlc's rules) or Python values. Nothing is stored
        unless every key is valid and every required field is given.
        """
        self._run(kwargs, option, unknown=None, reset=True)

    def init_allow_unknown(self, kwargs):
        """As init, but returns the unknown (key, value) pairs instead of raising."""
        unknown = []
        self._run(kwargs, ParamInitOption.kAllowUnknown, unknown, reset=True)
        return unknown

    def update_allow_unknown(self, kwargs):
        """Set only the given keys (the rest keep their values); returns the unknown pairs."""
        unknown = []
        self._run(kwargs, ParamInitOption.kAllowUnknown, unknown, reset=False)
        return unknown

    def _run(self, kwargs, option, unknown, reset):
        staged = {}
        for key, value in _pairs(kwargs):
            f = self._keys.get(key)
            if f is not None:
                staged[f.name] = f.convert(value)
            elif unknown is not None:
                unknown.append((key, value))
            elif not (option == ParamInitOption.kAllowUnknown
                      or (option == ParamInitOption.kAllowHidden and _is_hidden(key))):
                raise ParamError(f"Cannot find argument '{key}', Possible Arguments:\n"
                                 f"----------------\n{self.doc()}", key=key, value=value)
        if reset:
            for key in sorted(self._keys):   # dmlc walks entry_map_, a std::map, in key order
                f = self._keys[key]
                if f.name not in staged:
                    if not f.has_default:
                        raise ParamError(f"Required parameter {f.name} of {f.kind.name} is not "
                                         f"presented", key=f.name)
                    staged[f.name] = f.fresh_default()
        self.__dict__.update(staged)

    # ---- dmlc's __DICT__ / UpdateDict / __FIELDS__ / __DOC__ ----------------------------
    def to_dict(self):
        """Every key (aliases too) -> its value as dmlc prints it, in key order."""
        out = {}
        for key, f in sorted(self._keys.items()):
            if f.name not in self.__dict__:
                raise ParamError(f"Required parameter {f.name} of {f.kind.name} is not presented",
                                 key=f.name)
            out[key] = f.format_value(self.__dict__[f.name])
        return out

    def update_dict(self, d):
        """Write to_dict() into the mapping ``d`` (dmlc's UpdateDict)."""
        d.update(self.to_dict())

    @classmethod
    def fields(cls):
        """One ParamFieldInfo per field, in declaration order (aliases excluded)."""
        return [f.info() for f in cls._fields.values()]

    @classmethod
    def doc(cls):
        """The doc text: ``name : type_info_str`` and the indented description, per field."""
        lines = []
        for info in cls.fields():
            lines.append(f"{info.name} : {info.type_info_str}\n")
            if info.description:
                lines.append(f"    {info.description}\n")
        return "".join(lines)

    # ---- JSON, in dmlc::JSONWriter's layout -----------------------------------------------
    def save_json(self, fp=None):
        """``{"key": "value", ...}`` in key order; returned, and written to ``fp`` if given."""
        items = [f'"{k}": {_json_string(v)}' for k, v in self.to_dict().items()]
        if len(items) > 1:
            text = "{\n  " + ", \n  ".join(items) + "\n}"
        else:
            text = "{" + "".join(items) + "}"
        if fp is not None:
            fp.write(text)
        return text

    @classmethod
    def load_json(cls, source):
        """A new instance from save_json's text (a str or a file object), via init()."""
        text = source.read() if hasattr(source, "read") else source
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:   # malformed, huge numbers, deep nesting
            raise ParamError(f"{cls.__name__}.load_json: not valid parameter JSON "
                             f"({type(e).__name__}: {str(e)[:120]})") from None
        if not isinstance(data, dict):
            raise ParamError(f"{cls.__name__}.load_json expects a JSON object, got {type(data).__name__}")
        p = cls()
        p.init(data)
        return p

    # ---- Python protocol -----------------------------------------------------------------
    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        mine, theirs = self.__dict__, other.__dict__
        return all((n in mine) == (n in theirs) and (n not in mine or _same(mine[n], theirs[n]))
                   for n in self._fields)

    __hash__ = None   # mutable

    def __repr__(self):
        args = ", ".join(f"{n}={f.literal(self.__dict__[n])}"
                         for n, f in self._fields.items() if n in self.__dict__)
        return f"{type(self).__name__}({args})"
