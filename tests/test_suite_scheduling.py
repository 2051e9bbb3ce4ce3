"""How tests/conftest.py spreads the suite over pytest-xdist workers: which tests must share a
worker because they use a fixture built once per module (README.md, quick start)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import scope_of, shared_fixture_users

MODULE = '''
import pytest

@pytest.fixture(scope="module")
def sealed(tmp_path_factory): ...

@pytest.fixture(scope="session")
def machine(): ...

@pytest.fixture
def ledger(sealed): ...

@pytest.fixture
def plain(tmp_path): ...

def test_direct(sealed): ...

def test_through_a_function_fixture(ledger): ...

@pytest.mark.parametrize("x", [1, 2])
def test_alone(plain, machine, x): ...

class TestGrouped:
    def test_method(self, sealed): ...
'''


@pytest.fixture
def module(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    path = tmp_path / "tests" / "test_m.py"
    path.write_text(MODULE)
    return path


def test_users_of_a_module_fixture_directly_or_through_another_fixture(module: Path) -> None:
    assert shared_fixture_users(module) >= {"test_direct", "test_through_a_function_fixture",
                                            "test_method", "ledger"}
    assert "test_alone" not in shared_fixture_users(module)  # session scope: every worker


@pytest.mark.parametrize("nodeid,scope", [
    ("tests/test_m.py::test_direct", "tests/test_m.py"),
    ("tests/test_m.py::test_through_a_function_fixture", "tests/test_m.py"),
    ("tests/test_m.py::TestGrouped::test_method", "tests/test_m.py"),
    ("tests/test_m.py::test_alone[1]", "tests/test_m.py::test_alone[1]"),
    ("tests/test_m.py::test_alone[2]", "tests/test_m.py::test_alone[2]"),
    ("tests/test_gone.py::test_x", "tests/test_gone.py::test_x"),  # unreadable: alone
])
def test_scope_of_a_test(module: Path, nodeid: str, scope: str) -> None:
    assert scope_of(module.parent.parent, nodeid) == scope


def test_the_cli_tests_that_use_the_demo_share_its_worker() -> None:
    """The demo, the suite's costliest fixture, is built once (tests/test_cli.py)."""
    users = shared_fixture_users(Path(__file__).with_name("test_cli.py"))
    assert {"test_demo_prints_identity_n_mean_and_interval",
            "test_rulebook_publishes_and_beats_a_weaker_variant_in_compare",
            "test_compare_across_identities_is_refused",
            "test_reference_solvers_that_must_be_caught_are_caught_without_a_rate"} <= users
    assert "test_demo_of_the_exact_diff_example_prints_its_figures" not in users
