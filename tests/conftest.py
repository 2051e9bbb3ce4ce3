"""Shared fixtures: a fresh toy protocol, a ledger path, and a CLI runner per test.

Also how the suite spreads over pytest-xdist workers (`make test` runs `-n auto --dist
loadscope`; README.md, quick start): a test that uses a module-scoped fixture is
sent to the same worker as the other tests of its module that use it, so that fixture (a sealed
example, a whole dataset solved) is built once; every other test is scheduled on its own, slow
ones first, so that no long test starts last and leaves one worker running alone.
"""

from __future__ import annotations

import ast
import os
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from format_checks import check_text, check_tree, validated
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


# tmp_paths checked after their test (or left alone: forged on purpose), not walked again at
# the end of the session
_CHECKED_DIRS: set[Path] = set()


@pytest.fixture(autouse=True)
def _documents_match_their_schemas(request: pytest.FixtureRequest, tmp_path: Path
                                   ) -> Iterator[None]:
    """After each test, every report, comparison and export it wrote under tmp_path must
    validate against the schema `sealbench schema NAME` prints (issue 14, acceptance 4;
    tests/format_checks.py). A test that forges invalid ones on purpose is marked
    `forged_documents`."""
    yield
    _CHECKED_DIRS.add(tmp_path)
    if request.node.get_closest_marker("forged_documents") is None:
        found = check_tree(tmp_path)
        if found:
            pytest.fail("written documents do not match their shipped schema:\n"
                        + "\n".join(found), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _shared_documents_match_their_schemas(tmp_path_factory: pytest.TempPathFactory
                                          ) -> Iterator[None]:
    """The same check, at the end of the session, for what module- and session-scoped
    fixtures wrote (their directories are no test's tmp_path)."""
    yield
    base = tmp_path_factory.getbasetemp()
    found = [problem for child in sorted(base.iterdir())  # not pytest's NAMEcurrent links
             if child.is_dir() and not child.is_symlink()
             and not any(d == child or d.is_relative_to(child) for d in _CHECKED_DIRS)
             for problem in check_tree(child)]
    if found:
        pytest.fail("documents written by shared fixtures do not match their shipped "
                    "schema:\n" + "\n".join(found), pytrace=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if validated:
        counts = ", ".join(f"{count} {name}" for name, count in sorted(validated.items()))
        terminalreporter.write_line(f"documents validated against their shipped schemas: {counts}")


SHARED_SCOPES = frozenset({"module", "package", "class"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # every worker sorts the same collection the same way (xdist checks they agree)
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)  # xdist may be absent (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope`, with the scope of a test narrowed to what must share a worker: its
    module when it uses a fixture built once per module (or class), else the test alone.

    xdist's own `--dist loadgroup` (marks read from the nodeid) does not work with pytest 9,
    whose node ids are no longer plain strings; the controller collects nothing, so the
    grouping is read from the test files' source (shared_fixture_users)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(Path(config.rootpath), nodeid)

    return SharedFixtureScheduling(config, log)


def scope_of(root: Path, nodeid: str) -> str:
    """The unit of work a test belongs to: its file when it uses a shared fixture, else
    itself."""
    path, _, rest = nodeid.partition("::")
    name = rest.split("[", 1)[0].rsplit("::", 1)[-1]
    return path if name in shared_fixture_users(root / path) else nodeid


@cache
def shared_fixture_users(path: Path) -> frozenset[str]:
    """Names of the functions in a test file that request, directly or through the file's
    other fixtures, a fixture the file defines with a module, package or class scope."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    requests = {f.name: {a.arg for a in (*f.args.posonlyargs, *f.args.args,
                                          *f.args.kwonlyargs)} for f in functions}
    shared = {f.name for f in functions if _fixture_scope(f) in SHARED_SCOPES}
    fixtures = {f.name for f in functions if _fixture_scope(f) is not None}
    grown = True
    while grown:  # a function-scoped fixture that uses a shared one shares it too
        more = {name for name in fixtures - shared if requests[name] & shared}
        grown = bool(more)
        shared |= more
    return frozenset(name for name, args in requests.items() if args & shared)


def _fixture_scope(function: ast.FunctionDef) -> str | None:
    """"function" for a plain @pytest.fixture, its scope= for a called one, else None."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if not (isinstance(target, ast.Attribute) and target.attr == "fixture"):
            continue
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "scope" and isinstance(keyword.value, ast.Constant):
                    return str(keyword.value.value)
        return "function"
    return None


def session_cache_dir(factory: pytest.TempPathFactory, worker: str | None) -> Path:
    """One environment cache for the whole session: under pytest-xdist, beside the workers'
    own base directories, so an environment is built once rather than once per worker.
    Workers may build the same environment at once; environment.build publishes one of the
    builds by an atomic symlink and the others use it (tests/test_environment.py::
    test_two_processes_building_at_once_publish_one_environment)."""
    if not worker:
        return factory.mktemp("sealbench-cache")
    shared = factory.getbasetemp().parent / "sealbench-cache"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_cache_dir(tmp_path_factory, os.environ.get("PYTEST_XDIST_WORKER"))


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
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
        found = check_text(result.stdout)  # a report, comparison or export it printed
        assert not found, "printed documents do not match their shipped schema:\n" + \
            "\n".join(found)
        return result
