"""`python -m ptdp ARGS` and the wheel's `ptdp` command: the ptdp command line itself."""

import sys

from . import _ptdp


def main() -> int:
    try:
        return _ptdp.main(sys.argv[1:])
    except KeyboardInterrupt:
        # Ctrl-C: the command stopped ("ptdp: interrupted" on stderr); exit as a shell reports a
        # command that SIGINT ended, without Python's traceback.
        return 130


if __name__ == "__main__":
    sys.exit(main())
