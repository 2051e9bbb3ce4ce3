"""The Python API mirrors the CLI (README, "Python API")."""

from __future__ import annotations

import importlib
from pathlib import Path

from toy import make_protocol, write_solver

import sealbench
import sealbench.sealing  # a submodule import must not shadow the API function


def test_api_functions_are_functions_even_after_submodule_imports() -> None:
    importlib.import_module("sealbench.runner")
    importlib.import_module("sealbench.example")
    for name in ("init", "seal", "verify", "run", "resume", "trial", "demo", "build_report",
                 "compare_runs", "build_leaderboard", "import_swebench", "predictions",
                 "generate_key",
                 "load_signing_key", "load_public_key", "sign_report", "check_signature"):
        assert callable(getattr(sealbench, name)), name
        assert not isinstance(getattr(sealbench, name), type(sealbench)), name


def test_the_api_runs_the_pipeline(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto")
    ledger = sealbench.Ledger(tmp_path / "l.sqlite")
    sealed = sealbench.seal(proto, ledger=ledger)
    assert sealbench.verify(proto).identity == sealed.identity
    result = sealbench.run(proto, write_solver(tmp_path / "agent"), ledger=ledger,
                           options=sealbench.RunOptions(jobs=2))
    assert sealbench.build_report(ledger, result.run_id) == result.report
    assert result.report["n"] == 4
