"""``python -m clearpages``: runs the command line, which lives with the
measuring tools in clearpages.tools.cli (the library never imports them)."""

from __future__ import annotations

import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m clearpages"))
