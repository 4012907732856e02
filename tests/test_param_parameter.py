"""Parameter classes: declaration, Init/Update semantics, doc/dict/JSON formats, every error message,
and the Python-side extras (keywords, annotations, signature, registry, env helpers)."""
import copy
import inspect
import io
import json
import math
import pickle
import typing

import numpy as np
import pytest
from hypothesis import given, strategies as st

import mshadow as ms
from mshadow.param import (ParamError, ParamFieldInfo, ParamInitOption, Parameter, alias, field,
                           get_env, register, registry, set_env, unset_env)


class MyParam(Parameter):
    """The struct of dmlc-core's example/parameter.cc."""
    num_hidden = field(int).set_range(0, 1000).describe(
        "Number of hidden unit in the fully connected layer.")
    learning_rate = field(float).set_default(0.01).describe("Learning rate of SGD optimization.")
    activation = field(int).add_enum("relu", 1).add_enum("sigmoid", 2).describe(
        "Activation function type.")
    name = field(str).set_default("mnet").describe("Name of the net.")
    nhidden = alias("num_hidden")
    act = alias("activation")


EXAMPLE_DOC = """\
num_hidden : int, required
    Number of hidden unit in the fully connected layer.
learning_rate : float, optional, default=0.00999999978
    Learning rate of SGD optimization.
activation : {'relu', 'sigmoid'}, required
    Activation function type.
name : string, optional, default='mnet'
    Name of the net.
"""
EXCEED = ("value 2000 for Parameter num_hidden exceed bound [0,1000]\n"
          "num_hidden: Number of hidden unit in the fully connected layer.")


def test_example_doc():
    assert MyParam.doc() == EXAMPLE_DOC


def test_example_init_and_typed_attributes():
    p = MyParam()
    p.init({"num_hidden": "100", "name": "aaa", "activation": "relu"})
    assert (p.num_hidden, p.name, p.activation) == (100, "aaa", 1)
    assert type(p.num_hidden) is int and type(p.activation) is int
    assert "%f" % p.learning_rate == "0.010000"
    assert p.learning_rate == np.float32(0.01)


def test_example_exceed_bound():
    with pytest.raises(ParamError) as e:
        MyParam().init({"num_hidden": "2000", "activation": "relu"})
    assert str(e.value) == EXCEED
    assert (e.value.key, e.value.value) == ("num_hidden", "2000")
    with pytest.raises(ParamError, match="^value 2000 for Parameter num_hidden exceed bound"):
        MyParam(num_hidden=2000, activation="relu")


def test_fields_info():
    assert MyParam.fields() == [
        ParamFieldInfo("num_hidden", "int", "int, required",
                       "Number of hidden unit in the fully connected layer."),
        ParamFieldInfo("learning_rate", "float", "float, optional, default=0.00999999978",
                       "Learning rate of SGD optimization."),
        ParamFieldInfo("activation", "int", "{'relu', 'sigmoid'}, required", "Activation function type."),
        ParamFieldInfo("name", "string", "string, optional, default='mnet'", "Name of the net."),
    ]


class Formats(Parameter):
    i = field(int).set_default(5)
    l = field("long").set_default(5)      # noqa: E741
    u = field("uint32").set_default(1)
    b = field(bool).set_default(True)
    d = field("double").set_default(1.5)
    act = field(int).add_enum("sigmoid", 2).add_enum("relu", 1).set_default("relu")
    oi = field(int, optional=True).set_default(None)
    oe = field(int, optional=True).add_enum("one", 1).set_default(None)
    of = field(float, optional=True).set_default(2.5)
    ob = field(bool, optional=True).set_default(None)
    k = field(ms.TShape).set_default((3, 3))
    s = field("Shape(tuple)")


def test_type_info_strings():
    assert [f.type_info_str for f in Formats.fields()] == [
        "int, optional, default='5'",                 # FieldEntry<int> quotes its default
        "long, optional, default=5",
        "int (non-negative), optional, default=1",
        "boolean, optional, default=1",
        "double, optional, default=1.5",
        "{'relu', 'sigmoid'},optional, default='relu'",   # no space after the comma [verified]
        "int or None, optional, default='None'",
        "{None, 'one'},optional, default='None'",
        "float or None, optional, default=2.5",
        "boolean or None, optional, default=None",
        "Shape(tuple), optional, default=(3,3)",
        "Shape(tuple), required",
    ]


def test_to_dict_has_aliases_in_key_order():
    p = MyParam(num_hidden=100, activation="sigmoid")
    d = p.to_dict()
    assert d == {"act": "sigmoid", "activation": "sigmoid", "learning_rate": "0.00999999978",
                 "name": "mnet", "nhidden": "100", "num_hidden": "100"}
    assert list(d) == sorted(d)
    out = {"other": "x"}
    p.update_dict(out)
    assert out == {"other": "x", **d}


def test_save_json_layout():
    p = MyParam(num_hidden=100, activation="relu")
    assert p.save_json() == ('{\n  "act": "relu", \n  "activation": "relu", \n'
                             '  "learning_rate": "0.00999999978", \n  "name": "mnet", \n'
                             '  "nhidden": "100", \n  "num_hidden": "100"\n}')

    class One(Parameter):
        s = field(str).set_default('a"b\\c\nd\te\r')
    # one key: dmlc's writer stays on one line; only \r \n \\ \t and " are escaped
    assert One().save_json() == '{"s": "a\\"b\\\\c\\nd\\te\\r"}'
    assert One.load_json(One().save_json()).s == 'a"b\\c\nd\te\r'


def test_json_round_trip_through_text_and_files():
    p = MyParam(num_hidden=7, activation="sigmoid", name="net 2")
    assert MyParam.load_json(p.save_json()) == p
    buf = io.StringIO()
    p.save_json(buf)
    buf.seek(0)
    assert MyParam.load_json(buf) == p
    assert json.loads(p.save_json())["num_hidden"] == "7"
    with pytest.raises(ParamError, match="expects a JSON object"):
        MyParam.load_json("[1, 2]")


# ---- Init semantics --------------------------------------------------------------------------
def test_later_keys_win_and_aliases_set_the_field():
    p = MyParam()
    p.init([("nhidden", "5"), ("num_hidden", "100"), ("act", "sigmoid")])
    assert p.num_hidden == 100 and p.activation == 2
    p.init({"num_hidden": "100", "nhidden": "5", "activation": "relu"})   # dict: insertion order
    assert p.num_hidden == 5


def test_init_resets_unspecified_fields_to_defaults():
    p = MyParam(num_hidden=1, activation="relu", learning_rate=0.5, name="x")
    p.init({"num_hidden": "2", "activation": "relu"})
    assert (p.learning_rate, p.name) == (np.float32(0.01), "mnet")


def test_missing_required_reported_in_key_order():
    with pytest.raises(ParamError) as e:
        MyParam().init({})
    # dmlc walks its std::map of keys: 'act' (activation's alias) sorts first
    assert str(e.value) == "Required parameter activation of int is not presented"
    with pytest.raises(ParamError) as e:
        MyParam().init({"act": "relu"})
    assert str(e.value) == "Required parameter num_hidden of int is not presented"


def test_unknown_key_message_has_full_doc():
    with pytest.raises(ParamError) as e:
        MyParam().init({"num_hidden": "1", "activation": "relu", "foo": "1"})
    assert str(e.value) == "Cannot find argument 'foo', Possible Arguments:\n----------------\n" + EXAMPLE_DOC
    assert e.value.key == "foo"


def test_init_options():
    base = {"num_hidden": "1", "activation": "relu"}
    p = MyParam()
    p.init({**base, "__hidden__": "x"})                                 # kAllowHidden (default)
    for key in ("foo", "____", "__x", "x__"):
        with pytest.raises(ParamError, match=f"Cannot find argument '{key}'"):
            p.init({**base, key: "x"})
    with pytest.raises(ParamError, match="Cannot find argument '__hidden__'"):
        p.init({**base, "__hidden__": "x"}, option=ParamInitOption.kAllMatch)
    p.init({**base, "foo": "x"}, option=ParamInitOption.kAllowUnknown)
    assert [int(o) for o in ParamInitOption] == [0, 1, 2]


def test_init_allow_unknown_returns_pairs():
    p = MyParam()
    assert p.init_allow_unknown({"num_hidden": "3", "foo": "bar", "activation": "relu",
                                 "__x__": "y"}) == [("foo", "bar"), ("__x__", "y")]
    assert p.num_hidden == 3 and p.name == "mnet"


def test_failed_init_stores_nothing():
    p = MyParam(num_hidden=10, activation="relu", name="keep")
    with pytest.raises(ParamError):
        p.init({"num_hidden": "20", "name": "other", "activation": "tanh"})
    with pytest.raises(ParamError):
        p.update_allow_unknown({"name": "other", "num_hidden": "-1"})
    assert (p.num_hidden, p.name) == (10, "keep")


def test_values_may_be_python_values():
    p = MyParam()
    p.init({"num_hidden": np.int64(12), "activation": 2, "learning_rate": np.float32(0.5)})
    assert (p.num_hidden, p.activation, p.learning_rate) == (12, 2, 0.5)


# ---- checks and their messages ------------------------------------------------------------------
class Bounds(Parameter):
    lr = field(float).set_range(0, 1).describe("Learning rate.")
    wd = field("double").set_lower_bound(0.001).set_default(0.01)
    n = field(int).set_lower_bound(1).set_default(1)


def test_bound_messages():
    with pytest.raises(ParamError) as e:
        Bounds(lr="1.5")
    assert str(e.value) == "value 1.5 for Parameter lr exceed bound [0,1]\nlr: Learning rate."
    with pytest.raises(ParamError) as e:
        Bounds(lr=0.5, wd="0.0001")
    # an empty description still gets its line, as in dmlc
    assert str(e.value) == "value 0.0001 for Parameter wd should be greater equal to 0.001\nwd: "
    with pytest.raises(ParamError, match="^value 0 for Parameter n should be greater equal to 1\nn: $"):
        Bounds(lr=0, n=0)
    assert Bounds(lr="1", n="1000").lr == 1.0            # both ends inclusive
    assert math.isnan(Bounds(lr="nan").lr)               # NaN compares false: dmlc lets it pass


@given(st.floats(width=32, allow_nan=False, allow_infinity=False).filter(
    lambda x: not 0 <= x <= 1 and abs(x) >= 2.0 ** -126))
def test_any_value_outside_a_float_range_gets_the_exact_message(x):
    with pytest.raises(ParamError) as e:
        Bounds(lr=x)
    # the value prints with plain ostream <<, i.e. printf's %g
    assert str(e.value) == "value %g for Parameter lr exceed bound [0,1]\nlr: Learning rate." % x


@given(st.integers(-2**31, 2**31 - 1).filter(lambda n: not 0 <= n <= 1000))
def test_any_int_outside_the_range_gets_the_exact_message(n):
    with pytest.raises(ParamError) as e:
        MyParam(num_hidden=str(n), activation="relu")
    assert str(e.value) == EXCEED.replace("2000", str(n), 1)


def test_enum_messages_and_values():
    with pytest.raises(ParamError) as e:
        MyParam(num_hidden=1, act="1")                   # numbers are not enum keys [verified]
    assert str(e.value) == "Invalid Input: '1', valid values are: {'relu', 'sigmoid'}"
    with pytest.raises(ParamError, match=r"^Invalid Input: 'RELU', valid"):
        MyParam(num_hidden=1, act="RELU")
    p = MyParam(num_hidden=1, activation=2)              # a Python int names the value
    assert p.to_dict()["activation"] == "sigmoid"
    with pytest.raises(ParamError, match=r"^Invalid Input: '3', valid values are: \{'relu', 'sigmoid'\}$"):
        p.activation = 3


def test_duplicate_enum_messages():
    with pytest.raises(ParamError) as e:
        field(int).add_enum("relu", 1).add_enum("relu", 3)
    assert str(e.value) == "Enum (relu: 3 exisit!)\nEnums: (relu: 1), "
    with pytest.raises(ParamError) as e:
        field(int).add_enum("b", 1).add_enum("a", 2).add_enum("c", 2)
    assert str(e.value) == "Enum (c: 2 exisit!)\nEnums: (a: 2), (b: 1), "
    with pytest.raises(TypeError, match="takes a str key and an int value"):
        field(int).add_enum(1, "relu")


def test_none_is_reserved_in_optional_enums():
    with pytest.raises(ParamError, match="^None is reserved for empty optional<int>$"):
        class P(Parameter):
            x = field(int, optional=True).add_enum("None", 0)


def test_python_float_out_of_range():
    p = Bounds(lr=0.5)
    with pytest.raises(ParamError, match=r"^Out of range value for wd, value='1e-320'$"):
        p.wd = 1e-320
    with pytest.raises(ParamError, match=r"^Out of range value for lr, value='1e\+39'$"):
        p.lr = 1e39
    with pytest.raises(ParamError, match=r"^Out of range value for lr, value='1e-50'$"):
        p.lr = 1e-50
    assert p.lr == 0.5


@pytest.mark.parametrize("key, value, shown, type_name", [
    ("n", 1.5, "1.5", "int"), ("n", True, "True", "int"), ("n", None, "None", "int"),
    ("lr", "x", "x", "float"), ("lr", True, "True", "float"), ("n", 2**31, str(2**31), "int")])
def test_python_values_with_wrong_type(key, value, shown, type_name):
    p = Bounds(lr=0.5)
    with pytest.raises(ParamError) as e:
        setattr(p, key, value)
    assert str(e.value) == f"Invalid Parameter format for {key} expect {type_name} but value='{shown}'"


def test_unsigned_python_ints_do_not_wrap():
    p = Formats(s=(1,))
    with pytest.raises(ParamError, match="expect int \\(non-negative\\) but value='-1'"):
        p.u = -1
    p.u = "-1"                                           # text follows istream: wraps
    assert p.u == 2**32 - 1


def test_shape_fields():
    p = Formats(s="(2, 3)")
    assert p.s == (2, 3) and p.k == (3, 3)
    p.s = 5
    assert p.s == (5,)
    p.s = [4, 4]
    assert str(p.to_dict()["s"]) == "(4,4)"

    class Conv(Parameter):
        kernel = field(ms.TShape).set_default((3, 3)).set_expect_ndim(2).enforce_nonzero()
    c = Conv()
    with pytest.raises(ParamError) as e:
        c.kernel = "(3,3,3)"
    assert str(e.value) == ("value (3,3,3)for Parameter kernel has wrong dimensions, "
                            "expected dimension=2")
    with pytest.raises(ParamError) as e:
        c.kernel = (3, 0)
    assert str(e.value) == ("value (3,0)for Parameter kernel is invalid, the input shape must be "
                            "nonzero in all dimensions")
    with pytest.raises(ParamError) as e:
        c.kernel = "(3,a)"
    assert str(e.value) == "Invalid Parameter format for kernel expect Shape(tuple) but value='(3,a)'"
    # a TShape default is mutable: each instance gets its own copy
    c.kernel[0] = 7
    assert Conv().kernel == (3, 3)


# ---- declaration -------------------------------------------------------------------------------
def test_annotations_declare_types():
    class A(Parameter):
        num_hidden: int = field().set_range(0, 1000)
        lr: "double" = field().set_default(0.1)           # noqa: F821  a dmlc type string
        drop: typing.Optional[float] = field().set_default(None)
        shape: ms.TShape = field().set_default(())
        flag: bool = field(optional=True).set_default(True)
    assert [f.type for f in A.fields()] == ["int", "double", "float or None", "Shape(tuple)",
                                            "boolean or None"]
    assert A(num_hidden=3).to_dict() == {"drop": "None", "flag": "1", "lr": "0.10000000000000001",
                                         "num_hidden": "3", "shape": "()"}


def test_postponed_annotations():
    source = ("from __future__ import annotations\n"
              "import typing\n"
              "class B(Parameter):\n"
              "    x: int = field().set_default(1)\n"
              "    y: typing.Optional[int] = field().set_default(None)\n")
    namespace = {"Parameter": Parameter, "field": field, "__name__": __name__}
    exec(source, namespace)
    assert [f.type for f in namespace["B"].fields()] == ["int", "int or None"]


def test_signature_and_docstring():
    sig = inspect.signature(MyParam)
    assert list(sig.parameters) == ["num_hidden", "learning_rate", "activation", "name"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())
    assert sig.parameters["num_hidden"].default is inspect.Parameter.empty
    assert sig.parameters["name"].default == "mnet"
    assert sig.parameters["num_hidden"].annotation is int
    assert sig.parameters["activation"].annotation == typing.Literal["relu", "sigmoid"]
    assert Formats.__signature__.parameters["act"].default == "relu"
    assert MyParam.__doc__ == ("The struct of dmlc-core's example/parameter.cc.\n\n"
                               "Parameters\n----------\n" + EXAMPLE_DOC)


def test_keyword_construction():
    p = MyParam(nhidden=4, act="relu")
    assert p.num_hidden == 4
    with pytest.raises(ParamError, match="^Cannot find argument 'hidden'"):
        MyParam(hidden=4, act="relu")
    with pytest.raises(AttributeError, match="required parameter num_hidden of MyParam has not been set"):
        MyParam().num_hidden
    assert MyParam().name == "mnet"


def test_attribute_assignment_validates_and_aliases_forward():
    p = MyParam(num_hidden=1, activation="relu")
    p.nhidden = "50"
    assert p.num_hidden == 50 and p.nhidden == 50
    with pytest.raises(ParamError, match="^" + EXCEED.replace("[", r"\[").replace("]", r"\]") + "$"):
        p.num_hidden = 2000
    assert p.num_hidden == 50
    p.act = "sigmoid"
    assert p.activation == 2


def test_inheritance_appends_fields():
    class Base(Parameter):
        a = field(int).set_default(1)
        b = alias("a")

    class Child(Base):
        c = field(str).set_default("x")
    assert [f.name for f in Child.fields()] == ["a", "c"]
    assert Child(b=3).to_dict() == {"a": "3", "b": "3", "c": "x"}


def test_declaration_errors():
    class Base(Parameter):
        a = field(int)
    with pytest.raises(ParamError, match="^key a has already been registered in Child$"):
        class Child(Base):
            a = field(int)
    with pytest.raises(ParamError, match="^key nothing has not been registered in P$"):
        class P(Parameter):
            x = alias("nothing")
    with pytest.raises(ParamError, match="^Alias a has already been registered in Child2$"):
        class Child2(Base):
            a = alias("a")
    with pytest.raises(TypeError, match="give the type"):
        class NoType(Parameter):
            x = field()
    with pytest.raises(TypeError, match="set_range/set_lower_bound need a numeric field"):
        class RangeOnStr(Parameter):
            x = field(str).set_range(0, 1)
    with pytest.raises(TypeError, match="add_enum needs an int"):
        class EnumOnFloat(Parameter):
            x = field(float).add_enum("a", 1)
    with pytest.raises(TypeError, match="need a TShape field"):
        class NdimOnInt(Parameter):
            x = field(int).set_expect_ndim(2)
    with pytest.raises(TypeError, match="may not hide Parameter.init"):
        class Hides(Parameter):
            init = field(int)
    with pytest.raises(TypeError, match="optional fields hold int, boolean, float or double"):
        field(str, optional=True)
    with pytest.raises(TypeError, match="unsupported parameter type"):
        field(list)
    with pytest.raises(ParamError, match="^Invalid Parameter format for x expect int but value='abc'$"):
        class BadDefault(Parameter):
            x = field(int).set_default("abc")


def test_one_field_object_per_name():
    f = field(int)
    with pytest.raises(TypeError, match="^one field\\(\\) object is declared twice, as a and b"):
        class Twice(Parameter):
            a = f
            b = f


# ---- Python protocol ---------------------------------------------------------------------------
def test_repr_eq_copy_pickle():
    p = MyParam(num_hidden=100, activation="relu")
    assert repr(p) == "MyParam(num_hidden=100, learning_rate=0.00999999978, activation='relu', name='mnet')"
    assert eval(repr(p)) == p
    q = copy.copy(p)
    q.name = "other"
    assert p.name == "mnet" and q != p
    assert pickle.loads(pickle.dumps(p)) == p
    assert MyParam() != p and MyParam() == MyParam()
    assert p != Formats(s=()) and (p == 1) is False
    nan = Bounds(lr="nan")
    assert nan == Bounds(lr=float("nan"))               # a NaN setting equals itself
    with pytest.raises(TypeError):
        hash(p)


# ---- registry ---------------------------------------------------------------------------------
def test_registry():
    @register
    class RegisteredParamForTest(Parameter):
        x = field(int).set_default(1)
    assert "RegisteredParamForTest" in registry.list()
    assert registry.get("RegisteredParamForTest") is RegisteredParamForTest
    assert "RegisteredParamForTest" in registry and len(registry) >= 1
    assert register(RegisteredParamForTest) is RegisteredParamForTest     # re-registering is fine
    with pytest.raises(KeyError, match="no Parameter registered as 'Nope'"):
        registry.get("Nope")
    with pytest.raises(TypeError):
        register(int)
    other = type("RegisteredParamForTest", (Parameter,), {"__module__": "elsewhere"})
    with pytest.raises(ParamError, match="^Parameter RegisteredParamForTest has already been registered"):
        register(other)


# ---- environment (dmlc::GetEnv / SetEnv, unittest_env.cc) --------------------------------------
def test_env_blank(monkeypatch):
    monkeypatch.setenv("MSHADOW_TEST_ENV", "foo")
    assert get_env("MSHADOW_TEST_ENV", "bar") == "foo"
    monkeypatch.setenv("MSHADOW_TEST_ENV", "")
    assert get_env("MSHADOW_TEST_ENV", "bar") == "bar"
    monkeypatch.delenv("MSHADOW_TEST_ENV")
    assert get_env("MSHADOW_TEST_ENV", 3) == 3


def test_env_parses_with_field_rules(monkeypatch):
    monkeypatch.setenv("MSHADOW_TEST_ENV", "4x")
    with pytest.raises(ParamError) as e:
        get_env("MSHADOW_TEST_ENV", 1)
    assert str(e.value) == "Invalid Parameter format for MSHADOW_TEST_ENV expect int but value='4x'"
    monkeypatch.setenv("MSHADOW_TEST_ENV", "FALSE")
    assert get_env("MSHADOW_TEST_ENV", True) is False
    monkeypatch.setenv("MSHADOW_TEST_ENV", "0.5")
    assert get_env("MSHADOW_TEST_ENV", 1.0) == 0.5
    assert get_env("MSHADOW_TEST_ENV", None, type="float") == 0.5


def test_set_env_formats_with_field_printer(monkeypatch):
    monkeypatch.setenv("MSHADOW_TEST_ENV", "")
    set_env("MSHADOW_TEST_ENV", 0.1, type="float")
    assert get_env("MSHADOW_TEST_ENV", "") == "0.100000001"
    set_env("MSHADOW_TEST_ENV", 0.1)                     # a Python float is a C double
    assert get_env("MSHADOW_TEST_ENV", "") == "0.10000000000000001"
    set_env("MSHADOW_TEST_ENV", True)
    assert get_env("MSHADOW_TEST_ENV", "") == "1"
    unset_env("MSHADOW_TEST_ENV")
    assert get_env("MSHADOW_TEST_ENV", "gone") == "gone"
    unset_env("MSHADOW_TEST_ENV")                        # unsetting twice is fine
