"""``python -m mshadow``: print this build's facts (see mshadow.config.show_config)."""
import argparse
import sys

from .config import get_config, show_config


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m mshadow",
        description="Print what this mshadow build has: version, compiler, SIMD levels, "
                    "OpenMP threads, BLAS and CUDA.")
    p.add_argument("--json", action="store_true", help="print the facts as a JSON object")
    p.add_argument("--config", action="store_true",
                   help="print the facts as text (the default)")
    return p


def main(argv=None):
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.json:
        import json
        print(json.dumps(get_config(), indent=1))
    else:
        show_config()
    return 0


def _run():
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (``python -m mshadow | head``): what it read is all it wanted.
        # Point stdout at devnull so the interpreter's own flush at exit cannot fail again.
        import os
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = 1   # as the Python docs advise (signal.SIGPIPE's note): not a success, no traceback
    return code


if __name__ == "__main__":
    sys.exit(_run())
