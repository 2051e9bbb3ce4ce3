"""sealbench: run coding agents on a sealed benchmark protocol, and refuse to print a success
rate until the protocol is sealed and its null pack behaves.

The Python API mirrors the CLI, one function per command:

    sealbench.init(dir)                      # sealbench init DIR
    sealbench.seal(dir, ledger=...)          # sealbench seal DIR
    sealbench.verify(dir)                    # sealbench verify DIR
    sealbench.run(dir, solver, ledger=...)   # sealbench run DIR --solver CMD
    sealbench.build_report(ledger, run_id)   # sealbench report RUN_ID
    sealbench.Ledger(path).runs()            # sealbench runs
    sealbench.demo()                         # sealbench demo
"""

__version__ = "0.1.0"

from sealbench.errors import BadInput, Refused, SealbenchError
from sealbench.example import demo, init
from sealbench.ledger import Ledger
from sealbench.report import build_report
from sealbench.runner import RunOptions, RunResult, run
from sealbench.seal import SealResult, seal, verify

__all__ = [
    "BadInput",
    "Ledger",
    "Refused",
    "RunOptions",
    "RunResult",
    "SealResult",
    "SealbenchError",
    "__version__",
    "build_report",
    "demo",
    "init",
    "run",
    "seal",
    "verify",
]
