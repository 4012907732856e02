"""Field descriptors (DMLC_DECLARE_FIELD / DMLC_DECLARE_ALIAS) and the value kinds they hold.

A _Kind is one of dmlc's FieldEntry<T> types: its type string, how it reads text and Python
values and how it prints. A Field adds the builders (default, range, enum, ...) and the messages.
"""
import copy
import math
import numbers
import operator
import typing
from collections import namedtuple

from ..errors import ParamError
from . import parsing
from .parsing import BadFormat, OutOfRange, Trailing

ParamFieldInfo = namedtuple("ParamFieldInfo", "name type type_info_str description")
ParamFieldInfo.__doc__ = "dmlc's ParamFieldInfo: one row of Parameter.fields()."

_MISSING = object()


class _Kind:
    """One value type. ``name`` is dmlc's type string; subclasses fill in the rest."""
    numeric = False         # accepts set_range / set_lower_bound
    quote_default = False   # dmlc prints the default of this type as '<v>'
    annotation = object

    def coerce(self, value):
        """A Python value (or text, which is parsed) to the stored value."""
        if isinstance(value, str):
            return self.parse(value)
        return self.from_python(value)

    def format(self, value):
        """The text FieldEntry<T> prints (to_dict, save_json, the doc's default)."""
        return str(value)

    def format_plain(self, value):
        """``ostream << v`` without setprecision: range messages, and optional<T> values."""
        return self.format(value)

    def literal(self, value):
        """Python source for the value, used by Parameter.__repr__."""
        return repr(value)


class _Int(_Kind):
    numeric = True
    annotation = int

    def __init__(self, name, bits, signed, quote_default=False):
        self.name, self.bits, self.signed = name, bits, signed
        self.quote_default = quote_default   # only FieldEntry<int> quotes its default
        self.lo = -(1 << (bits - 1)) if signed else 0
        self.hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1

    def parse(self, text):
        return parsing.parse_int(text, self.bits, self.signed)

    def from_python(self, value):
        # Python ints must fit exactly: only text gets istream's unsigned wrap-around
        if isinstance(value, bool):
            raise BadFormat(value)
        try:
            value = operator.index(value)
        except TypeError:
            raise BadFormat(value) from None
        if not self.lo <= value <= self.hi:
            raise BadFormat(value)
        return value


class _Float(_Kind):
    numeric = True
    annotation = float

    def __init__(self, double):
        self.double = double
        self.name = "double" if double else "float"
        self.digits = 17 if double else 9   # max_digits10
        self.tiny = parsing.DBL_MIN if double else parsing.FLT_MIN

    def parse(self, text):
        return parsing.stof(text, self.double)

    def from_python(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise BadFormat(value)
        x = float(value)
        y = x if self.double else parsing.to_f32(x)
        # as for text, a value that would overflow or lose its normal precision is refused
        if (math.isinf(y) and not math.isinf(x)) or (x != 0 and abs(y) < self.tiny):
            raise OutOfRange(value)
        return y

    def format(self, value):
        return parsing.format_g(value, self.digits)

    def format_plain(self, value):
        return parsing.format_g(value, 6)

    def literal(self, value):
        text = self.format(value)
        return text if math.isfinite(value) else repr(text)


class _Bool(_Kind):
    name = "boolean"
    annotation = bool

    def parse(self, text):
        return parsing.parse_bool(text)

    def from_python(self, value):
        return value if isinstance(value, bool) else self.parse(str(value))

    def format(self, value):
        return "1" if value else "0"


class _Str(_Kind):
    name = "string"
    quote_default = True
    annotation = str

    def parse(self, text):
        return text

    def from_python(self, value):
        raise BadFormat(value)


class _Shape(_Kind):
    """MXNet's FieldEntry<TShape>; mshadow.blob is imported only when a shape is read."""
    name = "Shape(tuple)"
    annotation = "TShape"

    def parse(self, text):
        from ..blob import TShape
        try:
            return TShape.parse(text.strip(parsing.C_SPACE))
        except ValueError:
            raise BadFormat(text) from None

    def from_python(self, value):
        from ..blob import TShape
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            value = (value,)   # like the text '5'; TShape(5) would mean five ones
        try:
            return TShape([operator.index(d) for d in value])   # always a fresh copy
        except (TypeError, ValueError):
            raise BadFormat(value) from None

    def coerce(self, value):
        return self.from_python(self.parse(value) if isinstance(value, str) else value)

    def literal(self, value):
        return str(value)


class _Optional(_Kind):
    """dmlc::optional<T>: 'None' or a T. Printed with plain ``<<`` (6 digits for floats)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name + " or None"
        self.quote_default = inner.name == "int"   # only FieldEntry<optional<int>> quotes
        self.annotation = typing.Optional[inner.annotation]

    def parse(self, text):
        if self.inner.name == "boolean":
            return parsing.parse_optional_bool(text)
        return parsing.parse_optional(text, self.inner.name)

    def from_python(self, value):
        return None if value is None else self.inner.from_python(value)

    def format(self, value):
        return "None" if value is None else self.inner.format_plain(value)

    def literal(self, value):
        return "None" if value is None else self.inner.literal(value)


_INT = _Int("int", 32, True, quote_default=True)
_KINDS = {k.name: k for k in (
    _INT, _Int("long", 64, True), _Int("int (non-negative)", 32, False),
    _Int("long (non-negative)", 64, False), _Float(False), _Float(True), _Bool(), _Str(), _Shape())}
for _name in ("int", "boolean", "float", "double"):
    _KINDS[_name + " or None"] = _Optional(_KINDS[_name])
_SHAPE = _KINDS["Shape(tuple)"]
_ENUM_KINDS = (_INT, _KINDS["int or None"])

# Python types and other spellings of dmlc's type strings
_SPELLINGS = {int: "int", float: "float", bool: "boolean", str: "string",
              "int32": "int", "int64": "long", "uint32": "int (non-negative)",
              "uint64": "long (non-negative)", "float32": "float", "float64": "double",
              "bool": "boolean", "str": "string", "shape": "Shape(tuple)", "TShape": "Shape(tuple)"}


def kind_of(spec, optional=False):
    """The kind for ``field(spec)``: a Python type, TShape, Optional[T] or a dmlc type string."""
    args = typing.get_args(spec)
    if len(args) == 2 and type(None) in args:       # Optional[T], T | None
        spec = args[0] if args[1] is type(None) else args[1]
        optional = True
    if isinstance(spec, type) and (spec.__module__, spec.__qualname__) == ("mshadow.blob", "TShape"):
        spec = "Shape(tuple)"
    try:
        name = _SPELLINGS.get(spec, spec)
    except TypeError:   # unhashable spec
        name = spec
    if isinstance(name, str) and name.endswith(" or None"):
        name, optional = name[:-len(" or None")], True
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise TypeError(f"unsupported parameter type {spec!r}: use int, float, bool, str, "
                        f"TShape or one of {sorted(k for k in _KINDS if ' or None' not in k)}")
    if optional:
        kind = _KINDS.get(kind.name + " or None")
        if kind is None:
            raise TypeError(f"optional fields hold int, boolean, float or double, not {name}")
    return kind


class Field:
    """One declared parameter; build it with :func:`field` and the chained builders."""

    def __init__(self, type=None, optional=False):
        self.name = None
        self.kind = None if type is None else kind_of(type, optional)
        self._optional = optional
        self.description = ""
        self._raw_default = _MISSING
        self.default = _MISSING
        self.lower = self.upper = None
        self.enum = {}             # key -> int, as add_enum was called
        self.expect_ndim = 0
        self.nonzero = False
        self._bound = False

    # ---- builders (each returns the field, as dmlc's do) --------------------------------
    def describe(self, description):
        """Set the doc line of the field (``describe``)."""
        self.description = description
        return self

    def set_default(self, value):
        """Make the field optional with this default (``set_default``)."""
        self._raw_default = value
        if self._bound:   # declared after class creation: resolve now
            self.default = self.read(value)
        return self

    def set_range(self, lower, upper):
        """Both ends inclusive."""
        self.lower, self.upper = lower, upper
        return self

    def set_lower_bound(self, lower):
        """Values must be ``>= lower`` (``set_lower_bound``)."""
        self.lower = lower
        return self

    def add_enum(self, key, value):
        """Accept the text ``key`` for the int ``value`` (``add_enum``)."""
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"add_enum(key, value) takes a str key and an int value, got {key!r}, {value!r}")
        if key in self.enum or value in self.enum.values():
            listed = "".join(f"({k}: {v}), " for k, v in sorted(self.enum.items()))
            raise ParamError(f"Enum ({key}: {value} exisit!)\nEnums: {listed}", key=key, value=value)
        self.enum[key] = value
        return self

    def set_expect_ndim(self, ndim):
        """A TShape field must have ``ndim`` dims (``set_expect_ndim``)."""
        self.expect_ndim = ndim
        return self

    def enforce_nonzero(self):
        """A TShape field may not contain 0 (``enforce_nonzero``)."""
        self.nonzero = True
        return self

    # ---- binding to a Parameter class ---------------------------------------------------
    def __set_name__(self, owner, name):
        if self.name is None:   # a second name is reported by Parameter, where errors are not wrapped
            self.name = name

    def _bind(self, owner_name, name, annotation):
        """Resolve the type (from the annotation if field() named none) and check the builders."""
        where = f"{owner_name}.{self.name}"
        if self._bound or self.name != name:
            raise TypeError(f"one field() object is declared twice, as {self.name} and {name}; "
                            f"create one field() per parameter")
        if self.kind is None:
            if annotation is None:
                raise TypeError(f"{where}: give the type, field(int), or annotate: "
                                f"{self.name}: int = field()")
            self.kind = kind_of(annotation, self._optional)
        kind = self.kind
        if (self.lower is not None or self.upper is not None) and not kind.numeric:
            raise TypeError(f"{where}: set_range/set_lower_bound need a numeric field, not {kind.name}")
        if self.enum and kind not in _ENUM_KINDS:
            raise TypeError(f"{where}: add_enum needs an int or optional int field, not {kind.name}")
        if "None" in self.enum and kind.name == "int or None":
            raise ParamError("None is reserved for empty optional<int>", key=self.name)
        if (self.expect_ndim or self.nonzero) and kind is not _SHAPE:
            raise TypeError(f"{where}: set_expect_ndim/enforce_nonzero need a TShape field")
        if self.lower is not None:
            self.lower = self.read(self.lower)
        if self.upper is not None:
            self.upper = self.read(self.upper)
        if self._raw_default is not _MISSING:
            self.default = self.read(self._raw_default)
        self._bound = True

    # ---- values ------------------------------------------------------------------------
    @property
    def has_default(self):
        """True when the field is optional."""
        return self.default is not _MISSING

    def fresh_default(self):
        """A copy of the default, safe to store in an instance."""
        return copy.copy(self.default)   # a TShape default is mutable: never share it

    def python_default(self):
        """The default as a keyword argument would give it (an enum's key, not its number)."""
        return self.format_value(self.default) if self.enum else self.fresh_default()

    @property
    def annotation(self):
        """The Python type hint of the field (a Literal of the keys for an enum)."""
        if self.enum:
            keys = typing.Literal[tuple(self.enum)]
            return typing.Optional[keys] if self.kind.name == "int or None" else keys
        return self.kind.annotation

    def read(self, value):
        """dmlc's Set: parse text (or take a Python value) with this field's type rules."""
        try:
            return self._read(value)
        except BadFormat as e:
            shown = f"'{value}'"
            if len(shown) > 200:   # dmlc echoes the whole value; a 5,000-digit one is noise
                shown = f"'{shown[1:25]}...{shown[-9:-1]}' ({len(shown) - 2} characters)"
            hint = getattr(e, "hint", None)
            raise ParamError(f"Invalid Parameter format for {self.name} expect {self.kind.name} "
                             f"but value={shown}" + (f"\n{self.name}: {hint}" if hint else ""),
                             key=self.name, value=value) from None
        except OutOfRange:
            raise ParamError(f"Out of range value for {self.name}, value='{value}'",
                             key=self.name, value=value) from None
        except Trailing as e:
            raise ParamError(f"Some trailing characters could not be parsed: '{e.rest}'",
                             key=self.name, value=value) from None

    def convert(self, value):
        """dmlc's Set then Check: read the value, then validate range, ndim and zeros."""
        result = self.read(value)
        self._check(result, value)
        return result

    def _read(self, value):
        if (not self.enum or value is None
                or (isinstance(value, str) and value == "None" and self.kind.name == "int or None")):
            return self.kind.coerce(value)
        if isinstance(value, str):
            if value not in self.enum:   # enum text must be a key; numbers are refused, as in dmlc
                raise self._enum_error(value)
            return self.enum[value]
        number = self.kind.coerce(value)   # Python ints may name the value directly
        if number not in self.enum.values():
            raise self._enum_error(value)
        return number

    def _enum_error(self, value):
        return ParamError(f"Invalid Input: '{value}', valid values are: {self._enum_set()}",
                          key=self.name, value=value)

    def _enum_set(self):
        keys = [f"'{k}'" for k in sorted(self.enum)]
        if self.kind.name == "int or None":
            keys.insert(0, "None")
        return "{" + ", ".join(keys) + "}"

    def _check(self, v, raw):
        plain = self.kind.format_plain
        if self.lower is not None and self.upper is not None:
            if v < self.lower or v > self.upper:
                self._fail(f"value {plain(v)} for Parameter {self.name} exceed bound "
                           f"[{plain(self.lower)},{plain(self.upper)}]", raw, describe=True)
        elif self.lower is not None and v < self.lower:
            self._fail(f"value {plain(v)} for Parameter {self.name} should be greater equal to "
                       f"{plain(self.lower)}", raw, describe=True)
        # MXNet's TShape messages lack the space before "for"; kept, since logs are grepped
        if self.expect_ndim and len(v) != self.expect_ndim:
            self._fail(f"value {v}for Parameter {self.name} has wrong dimensions, expected "
                       f"dimension={self.expect_ndim}", raw)
        if self.nonzero and any(d == 0 for d in v):
            self._fail(f"value {v}for Parameter {self.name} is invalid, the input shape must be "
                       f"nonzero in all dimensions", raw)

    def _fail(self, message, raw, describe=False):
        if describe:
            message += f"\n{self.name}: {self.description}"
        raise ParamError(message, key=self.name, value=raw)

    def format_value(self, value):
        """The dmlc text of a stored value (enum values print as their key)."""
        if self.enum and value is not None:
            return next(k for k, v in self.enum.items() if v == value)
        return self.kind.format(value)

    def literal(self, value):
        """``value`` as Python source text, for generated signatures."""
        if self.enum and value is not None:
            return repr(self.format_value(value))
        return self.kind.literal(value)

    def info(self):
        """ParamFieldInfo, with dmlc's type_info_str (note: no space after ',' for enums)."""
        head, sep = (self._enum_set(), ",") if self.enum else (self.kind.name, ", ")
        if self.has_default:
            text = self.format_value(self.default)
            if self.kind.quote_default:
                text = f"'{text}'"
            tail = f"{sep}optional, default={text}"
        else:
            tail = ", required"
        return ParamFieldInfo(self.name, self.kind.name, head + tail, self.description)

    # ---- descriptor protocol: values live in the instance __dict__ under the field's name ----
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        try:
            return obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(f"required parameter {self.name} of {type(obj).__name__} "
                                 f"has not been set") from None

    def __set__(self, obj, value):
        obj.__dict__[self.name] = self.convert(value)

    def __repr__(self):
        kind = self.kind.name if self.kind else "?"
        return f"<field {self.name or '?'}: {kind}>"


class Alias:
    """A second key for a field (DMLC_DECLARE_ALIAS); reads and writes go to the field."""

    def __init__(self, target):
        self.target = target
        self.name = None
        self.field = None     # set when the Parameter class is created

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        return self if obj is None else self.field.__get__(obj, objtype)

    def __set__(self, obj, value):
        self.field.__set__(obj, value)

    def __repr__(self):
        return f"<alias {self.name} -> {self.target}>"


def field(type=None, optional=False):
    """Declare a parameter: ``field(int)``, ``field("double")``, ``field(float, optional=True)``.

    Without a type, the class annotation gives it: ``lr: float = field().set_default(0.1)``.
    """
    return Field(type, optional)


def alias(target):
    """Declare another name for the field ``target`` (DMLC_DECLARE_ALIAS)."""
    return Alias(target)
