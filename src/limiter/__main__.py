"""``python -m limiter``: the command line (``limiter.cli``, docs/cli.md)."""

import sys

from limiter.cli import main

if __name__ == "__main__":
    sys.exit(main())
