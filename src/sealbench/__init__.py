"""sealbench: run coding agents on a sealed benchmark protocol, and refuse to print a success
rate until the protocol is sealed and its null pack behaves.

The Python API mirrors the CLI, one function per command:

    sealbench.init(dir)                      # sealbench init DIR
    sealbench.sealing(dir, ledger=...)          # sealbench seal DIR
    sealbench.verify(dir)                    # sealbench verify DIR
    sealbench.run(dir, solver, ledger=...)   # sealbench run DIR --solver CMD
    sealbench.trial(dir, solver, ledger=..., options=RunOptions(tasks=(...)))  # run --task
    sealbench.build_report(ledger, run_id)   # sealbench report RUN_ID
    sealbench.Ledger(path).runs()            # sealbench runs
    sealbench.build_leaderboard([ledger], identity)  # sealbench leaderboard IDENTITY
    sealbench.demo()                         # sealbench demo
    sealbench.import_swebench(file, repos=..., out=...)  # sealbench import swebench FILE
    sealbench.predictions(ledger, run_id)    # sealbench export RUN_ID --format swebench-...
    sealbench.generate_key(path)             # sealbench keygen PATH
    sealbench.run(..., options=RunOptions(signer=sealbench.load_signing_key(path)))  # --sign
    sealbench.check_signature(report, sealbench.load_public_key(pub))  # verify-report --pubkey
"""

__version__ = "0.1.0"

# Imported on first use (PEP 562): the reference solvers live in this package and run once per
# attempt, so `import sealbench.solvers.rulebook` must not pay for scipy and the whole harness.
_EXPORTS = {
    "BadInput": "sealbench.errors",
    "Refused": "sealbench.errors",
    "SealbenchError": "sealbench.errors",
    "demo": "sealbench.example",
    "init": "sealbench.example",
    "Ledger": "sealbench.ledger",
    "build_report": "sealbench.report",
    "RunOptions": "sealbench.runner",
    "RunResult": "sealbench.runner",
    "run": "sealbench.runner",
    "trial": "sealbench.runner",
    "TrialResult": "sealbench.runner",
    "resume": "sealbench.runner",
    "SealResult": "sealbench.sealing",
    "seal": "sealbench.sealing",
    "verify": "sealbench.sealing",
    "compare_runs": "sealbench.compare",
    "build_leaderboard": "sealbench.leaderboard",
    "import_swebench": "sealbench.swebench",
    "predictions": "sealbench.swebench",
    "check_signature": "sealbench.signing",
    "generate_key": "sealbench.signing",
    "load_public_key": "sealbench.signing",
    "load_signing_key": "sealbench.signing",
    "sign_report": "sealbench.signing",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sealbench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
