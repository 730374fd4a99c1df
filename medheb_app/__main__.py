"""`python -m medheb_app ...` entry point."""

import sys

from medheb_app.cli import main

if __name__ == "__main__":
    sys.exit(main())
