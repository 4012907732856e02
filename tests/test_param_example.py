"""examples/guide/parameter.py prints what dmlc-core's example/parameter.cc prints [verified output]."""
import pathlib
import runpy

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "guide" / "parameter.py"
DOC = """\
Docstring
---------
num_hidden : int, required
    Number of hidden unit in the fully connected layer.
learning_rate : float, optional, default=0.00999999978
    Learning rate of SGD optimization.
activation : {'relu', 'sigmoid'}, required
    Activation function type.
name : string, optional, default='mnet'
    Name of the net.
start to set parameters ...
"""


def run_example(monkeypatch, capsys, *args):
    monkeypatch.setattr("sys.argv", [str(EXAMPLE), *args])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    out, err = capsys.readouterr()
    return e.value.code, out, err


def test_usage(monkeypatch, capsys):
    assert run_example(monkeypatch, capsys) == (0, "Usage: [key=value] ...\n", "")


def test_sets_parameters(monkeypatch, capsys):
    code, out, err = run_example(monkeypatch, capsys, "num_hidden=100", "name=aaa", "activation=relu")
    assert (code, err) == (0, "")
    assert out == DOC + ("-----\nparam.num_hidden=100\nparam.learning_rate=0.010000\n"
                         "param.name=aaa\nparam.activation=1\n")


def test_aliases_and_key_order(monkeypatch, capsys):
    # the C++ program collects a std::map, so num_hidden (sorted after nhidden) wins
    code, out, _ = run_example(monkeypatch, capsys, "num_hidden=100", "nhidden=5", "act=sigmoid")
    assert code == 0
    assert "param.num_hidden=100\n" in out and "param.activation=2\n" in out


def test_exceed_bound(monkeypatch, capsys):
    code, out, err = run_example(monkeypatch, capsys, "num_hidden=2000", "activation=relu")
    assert (code, out) == (1, DOC)
    assert err == ("value 2000 for Parameter num_hidden exceed bound [0,1000]\n"
                   "num_hidden: Number of hidden unit in the fully connected layer.\n")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_doc_and_succeeds(monkeypatch, capsys, flag):
    code, out, err = run_example(monkeypatch, capsys, flag)
    assert (code, err) == (0, "")
    doc = DOC.split("---------\n", 1)[1].replace("start to set parameters ...\n", "")
    assert out == "Usage: [key=value] ...\n\n" + doc
