"""`python -m ptdp ARGS` and the wheel's `ptdp` command: the ptdp command line itself."""

import sys

from . import _ptdp


def main() -> int:
    return _ptdp.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
