"""``python -m loadtrace``: the ``loadtrace`` command, where the script is not on PATH."""

import sys

from loadtrace.cli import main

sys.exit(main())
