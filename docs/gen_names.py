"""Generate the C++ -> Python name map (docs/_generated/cpp_names.md) from mshadow/aliases.py."""
import inspect
import re


def _first_line(obj):
    doc = inspect.getdoc(obj) or ""
    lines = [ln for ln in doc.splitlines() if ln.strip()]
    if lines and re.match(r"^[\w.]+\(.*\)(\s*->.*)?$", lines[0].strip()):
        lines = lines[1:]          # the signature Cython's embedsignature put first
    return lines[0].strip().replace("|", "\\|") if lines else ""


def rows():
    """(C++ spelling, Python spelling, what it does) for every alias in mshadow.aliases."""
    from mshadow import aliases
    out = []
    for cpp, fn in aliases._TABLE.items():
        mod = fn.__module__.replace("mshadow._core", "mshadow")
        out.append((f"mshadow::{cpp}", f"ms.{fn.__name__}  (also ms.{cpp})", _first_line(fn), mod))
    for cls, cpp, py in aliases.METHOD_ALIASES:
        meth = getattr(cls, py)
        out.append((f"{cls.__name__}::{cpp}", f"{cls.__name__}.{py}  (also .{cpp})",
                    _first_line(meth), "method"))
    return out


def render():
    lines = [
        "# C++ to Python names",
        "",
        "Generated from `mshadow/aliases.py` when the docs are built. Every C++ spelling here",
        "also works in Python, so ported code reads the same; the snake_case name is the",
        "primary one. Names that are the same in both languages (`Tensor`, `TensorContainer`,",
        "`Shape2`, `TShape`, `TBlob`, `kFloat32`, `cpu`, `gpu`, `broadcast`, `repmat`, `pool`,",
        "`sv.plusto`, `red.sum`, ...) are not listed.",
        "",
        "How the other C++ forms map:",
        "",
        "| C++ | Python |",
        "|---|---|",
        "| `Tensor<cpu, 2, float> t(ptr, Shape2(3, 4))` | `t = ms.from_numpy(a)` or `ms.new_tensor((3, 4), dtype=ms.float32)` |",
        "| `F<op::relu>(x)`, `F<maxoftwo>(a, b)` | `ms.F(ms.op.relu, x)`, `ms.F(maxoftwo, a, b)` with `@ms.op.define` |",
        "| `broadcast<1>(bias, shape)`, `swapaxis<1, 2>(x)`, `reduce_except_dim<red::sum, 1>(x)` | template arguments become arguments: `ms.broadcast(bias, shape, 1)`, `ms.swapaxis(x, 1, 2)`, `ms.reduce_except_dim(x, 1, ms.red.sum)` |",
        "| `x.T()`, `scalar<float>(2)`, `tcast<int>(x)` | `x.T`, `ms.scalar(2.0)`, `ms.tcast(ms.int32, x)` |",
        "| `dst = e; dst += e; dst -= e; dst *= e; dst /= e` | the same, with `dst[:] = e` for plain assignment |",
        "| `mshadow::expr::`, `mshadow::op::`, `mshadow::sv::`, `mshadow::red::` | `ms.`, `ms.op.`, `ms.sv.`, `ms.red.` |",
        "",
        "## Functions and methods",
        "",
        "| C++ | Python | what it does |",
        "|---|---|---|",
    ]
    for cpp, py, doc, _ in rows():
        lines.append(f"| `{cpp}` | `{py}` | {doc} |")
    return "\n".join(lines) + "\n"


def write(path):
    import os
    from mshadow.codegen_types import write_if_changed
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_if_changed(path, render())


if __name__ == "__main__":
    import sys
    sys.stdout.write(render())
