"""The bundle's entry point: the same command line as `specchat` (a bare run opens the window)."""

import sys

from specchat.cli import main

if __name__ == "__main__":
    sys.exit(main())
