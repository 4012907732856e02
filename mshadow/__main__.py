"""``python -m mshadow``: print this build's facts (see mshadow.config.show_config)."""
import sys

from .config import get_config, show_config


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv in ([], ["--config"]):
        show_config()
        return 0
    if argv == ["--json"]:
        import json
        print(json.dumps(get_config(), indent=1))
        return 0
    print("usage: python -m mshadow [--json]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
