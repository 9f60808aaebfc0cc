"""Import the repo's examples (not an installed package) from tests."""

import sys

from .paths import REPO

EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))

from make_checkpoint import make_checkpoint, summarize  # noqa: E402

__all__ = ["make_checkpoint", "summarize", "EXAMPLES"]
