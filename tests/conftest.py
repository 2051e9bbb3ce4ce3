"""Shared fixtures: a fresh toy protocol, a ledger path, and a CLI runner per test."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from toy import make_protocol, write_solver

from sealbench.cli import main


@pytest.fixture(autouse=True)
def _isolated_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own default ledger, so tests never see each other's protocols."""
    monkeypatch.setenv("SEALBENCH_LEDGER", str(tmp_path / "ledger" / "ledger.sqlite"))


@pytest.fixture(autouse=True)
def _scratch_in_the_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's attempts lay out their workspaces in the system temp dir, as they did
    before the default scratch moved to a tmpfs (docs/running.md#scratch): tests written
    against that location (test_hostile's neighbours probe looks under it) keep checking what
    they were written for. The memory default itself is tested in tests/test_harness.py, with
    SEALBENCH_SCRATCH unset."""
    monkeypatch.setenv("SEALBENCH_SCRATCH", tempfile.gettempdir())


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sealbench-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(_session_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Environments are built into a cache shared by this test session, never ~/.cache (tests
    of the cache itself point SEALBENCH_CACHE at their own directory)."""
    monkeypatch.setenv("SEALBENCH_CACHE", str(_session_cache))


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return make_protocol(tmp_path / "proto")


@pytest.fixture
def toy_solver(tmp_path: Path) -> str:
    return write_solver(tmp_path / "solver")


@pytest.fixture
def cli() -> Cli:
    return Cli()


class Cli:
    """Invoke the real CLI in-process; stdout and stderr are kept apart."""

    def __call__(self, *args: str | os.PathLike[str]) -> Result:
        runner = CliRunner()
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
