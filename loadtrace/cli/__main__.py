"""``python -m loadtrace.cli``: the ``loadtrace`` command."""

import sys

from loadtrace.cli.commands import main

sys.exit(main())
