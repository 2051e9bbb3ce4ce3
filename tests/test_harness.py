"""Harness-side failures are told apart from the solver's: retried, never scored."""

from __future__ import annotations

from pathlib import Path

import pytest
from toy import make_protocol

from sealbench.harness import INFRA_RETRIES, Harness, InfraFailure
from sealbench.ledger import Ledger
from sealbench.sandbox import detect
from sealbench.sealing import Lock, seal
from sealbench.solver import AttemptResult, CommandSolver

pytestmark = pytest.mark.sandbox


def _harness(tmp_path: Path) -> Harness:
    proto = make_protocol(tmp_path / "proto")
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    lock = Lock.model_validate_json((proto / "protocol.lock").read_bytes())
    from sealbench.protocol import load

    return Harness(load(proto, sealed=True), lock.sealed_files(), detect())


def test_a_sandbox_that_cannot_start_is_an_infrastructure_error(tmp_path: Path) -> None:
    """bwrap fails to set up (a mount source is missing): not the solver's failure."""
    with _harness(tmp_path) as harness:
        task = harness.protocol.dataset[0]
        broken = CommandSolver(("true",), visible=(tmp_path / "vanished-solver-dir",))
        result = harness.attempt(task, broken)
        assert isinstance(result, InfraFailure)
        assert result.tries == INFRA_RETRIES + 1
        assert "sandbox did not start" in result.detail


def test_a_solver_that_fails_like_bwrap_is_still_the_solvers_failure(tmp_path: Path) -> None:
    """Printing bwrap's error text and exiting 1 must not pass for a harness failure (which
    would take the task out of the denominator)."""
    with _harness(tmp_path) as harness:
        task = harness.protocol.dataset[0]
        faker = CommandSolver(("sh", "-c", "echo 'bwrap: Can'\\''t create file' >&2; exit 1"))
        result = harness.attempt(task, faker)
        assert isinstance(result, AttemptResult)
        assert result.outcome == "error"


def test_a_solver_that_does_not_exist_is_the_solvers_error(tmp_path: Path) -> None:
    """A typo in --solver is not a harness failure: it must not leave the denominator."""
    with _harness(tmp_path) as harness:
        task = harness.protocol.dataset[0]
        for argv in (("no-such-solver-xyz",), (str(tmp_path / "missing.sh"),)):
            result = harness.attempt(task, CommandSolver(argv))
            assert isinstance(result, AttemptResult)
            assert result.outcome == "error"
            assert "solver could not start" in result.detail
