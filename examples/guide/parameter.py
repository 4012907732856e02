"""Port of dmlc-core's example/parameter.cc: declare a Parameter, print its doc, init it from argv.

    python examples/guide/parameter.py num_hidden=100 name=aaa activation=relu
    python examples/guide/parameter.py num_hidden=2000 activation=relu  # exceed bound: ParamError
    python examples/guide/parameter.py --help                         # the parameters' doc
"""
import sys

from mshadow.param import ParamError, Parameter, alias, field, register


@register
class MyParam(Parameter):
    """The parameter struct of the dmlc example."""
    num_hidden = field(int).set_range(0, 1000).describe(
        "Number of hidden unit in the fully connected layer.")
    learning_rate = field(float).set_default(0.01).describe("Learning rate of SGD optimization.")
    activation = field(int).add_enum("relu", 1).add_enum("sigmoid", 2).describe(
        "Activation function type.")
    name = field(str).set_default("mnet").describe("Name of the net.")
    # user can also set nhidden besides num_hidden
    nhidden = alias("num_hidden")
    act = alias("activation")


def main(argv):
    if len(argv) == 1:
        print("Usage: [key=value] ...")
        return 0
    if any(a in ("-h", "--help") for a in argv[1:]):   # the C++ example has no flags: help only
        print("Usage: [key=value] ...\n\n" + MyParam.doc(), end="")
        return 0
    kwargs = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key and value:        # sscanf("%[^=]=%[^\n]") == 2
            kwargs[key] = value
    kwargs = dict(sorted(kwargs.items()))   # the C++ program collects a std::map: key order
    print("Docstring\n---------\n" + MyParam.doc(), end="")
    print("start to set parameters ...")
    param = MyParam()
    try:
        param.init(kwargs)
    except ParamError as e:               # C++ dies with "what():  <message>"
        print(e, file=sys.stderr)
        return 1
    print("-----")
    print("param.num_hidden=%d" % param.num_hidden)
    print("param.learning_rate=%f" % param.learning_rate)
    print("param.name=%s" % param.name)
    print("param.activation=%d" % param.activation)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
