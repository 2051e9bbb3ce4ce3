"""Control solver that leaves the workspace exactly as it found it.

The metric must reject an empty diff and the must-pass stubs must fail for it; if either
does not happen, the protocol would credit agents for doing nothing.
"""

from __future__ import annotations

import sys


def main() -> int:
    return 0


if __name__ == "__main__":
    sys.exit(main())
