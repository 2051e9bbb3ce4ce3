"""Names and defaults that the command line declares its options with.

Declaring the options happens for every command, `--help` and `--version` included, so these
live in a module that imports nothing: the modules they belong to import cryptography
(signing), pydantic and the protocol model (swebench) or the whole harness (example), which
only the commands that use them should pay for (cli.py's docstring).
"""

from __future__ import annotations

# `run --sign` / `report --sign` default (docs/signing.md)
SIGNING_KEY_ENV = "SEALBENCH_SIGNING_KEY"
# the bundled example protocols (docs/example.md)
EXAMPLE = "coding-repair"
EXAMPLES = (EXAMPLE, "coding-repair-exact")
# `export --format`: SWE-bench's predictions file (docs/swebench.md)
PREDICTIONS_FORMAT = "swebench-predictions"
# SWE-bench's own evaluation timeout (its run_evaluation default), for the agent and the tests
DEFAULT_TIMEOUT_SEC = 1800
