"""The solver contract, emulated without a sandbox, for testing the examples and their solvers.

Each attempt gets what the harness gives a solver: the fixture committed in a fresh git
repository, a read-only prompt file outside it, a refuse file, and the SEALBENCH_*
environment. The result is the workspace diff computed with neutral git config, scored by
the exact-diff example's metric module or, as the verifier does, by the test-graded example's
hidden tests run on a fresh checkout with the diff applied.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from junitparser import JUnitXml

import sealbench

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "src" / "sealbench" / "example" / "coding-repair"  # graded by hidden tests
EXACT_EXAMPLE = ROOT / "src" / "sealbench" / "example" / "coding-repair-exact"
GENERATOR = ROOT / "tools" / "gen_example.py"
SOLVER_TIMEOUT_SEC = 60

Task = dict[str, Any]


def load_tasks(relative: str, example: Path = EXAMPLE) -> list[Task]:
    lines = (example / relative).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def dataset(example: Path = EXAMPLE) -> list[Task]:
    """The dataset rows; the test-graded example's carry `tests` and the two test-id lists."""
    return load_tasks("tasks/repair_v1.jsonl", example)


def null_pack(example: Path = EXAMPLE) -> dict[str, Task]:
    return {task["id"]: task for task in load_tasks("tasks/null_pack_v1.jsonl", example)}


def load_module_from(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@cache
def metric() -> ModuleType:
    return load_module_from(EXACT_EXAMPLE / "metric_exact_diff.py", "example_metric")


def matches_oracle(task: Task, diff: str) -> bool:
    verdict = metric().score(diff, str(EXAMPLE / task["oracle"]))
    assert verdict["metric"] == "exact_diff_v1"
    return bool(verdict["pass"])


def git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(cwd.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
    }
    identity = ["-c", "user.name=x", "-c", "user.email=x@x", "-c", "init.defaultBranch=main"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout


def checkout(task: Task, dest: Path) -> Path:
    """The task's fixture as a one-commit git repository at ``dest``."""
    shutil.copytree(EXAMPLE / task["repo"], dest)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "fixture")
    return dest


def workspace_diff(workspace: Path) -> str:
    """The workspace against its fixture commit, new files included."""
    git(workspace, "add", "-A")
    return git(workspace, "diff", "--cached")


def changed_paths(workspace: Path) -> list[str]:
    git(workspace, "add", "-A")
    return git(workspace, "diff", "--cached", "--name-only").splitlines()


def added_lines(patch: str) -> list[str]:
    return [line[1:] for line in patch.splitlines()
            if line.startswith("+") and not line.startswith("+++")]


def apply_oracle(task: Task, workspace: Path) -> None:
    git(workspace, "apply", str(EXAMPLE / task["oracle"]))


@dataclass(frozen=True)
class Attempt:
    """One solver run on one task, as the harness would record it."""

    workspace: Path
    returncode: int
    stderr: str
    refusal: str
    diff: str
    changed: list[str]


def run_solver(solver: str, task: Task, scratch: Path) -> Attempt:
    """Run ``python -m sealbench.solvers.<solver> TASK_ID`` in a fresh workspace."""
    scratch.mkdir(parents=True)
    workspace = checkout(task, scratch / "workspace")
    prompt_file = scratch / "prompt.txt"
    prompt_file.write_text(task["prompt"], encoding="utf-8")
    prompt_file.chmod(0o444)
    refuse_file = scratch / "refuse.txt"
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        # the sealbench these tests import, not whichever one the interpreter's site finds
        # (an editable install of another checkout, say)
        "PYTHONPATH": str(Path(sealbench.__file__).resolve().parents[1]),
        "HOME": str(scratch),
        "SEALBENCH_TASK_ID": task["id"],
        "SEALBENCH_PROMPT_FILE": str(prompt_file),
        "SEALBENCH_REFUSE_FILE": str(refuse_file),
        "SEALBENCH_WORKSPACE": str(workspace),
    }
    done = subprocess.run(
        [sys.executable, "-m", f"sealbench.solvers.{solver}", task["id"]], cwd=workspace,
        env=env, capture_output=True, text=True, check=False, timeout=SOLVER_TIMEOUT_SEC,
    )
    refusal = refuse_file.read_text(encoding="utf-8") if refuse_file.exists() else ""
    return Attempt(workspace, done.returncode, done.stderr, refusal,
                   workspace_diff(workspace), changed_paths(workspace))


# --------------------------------------------------------------------------- hidden tests


@dataclass(frozen=True)
class Verdict:
    """The hidden tests on one attempt, judged as `tests_v1` does."""

    passed: dict[str, bool]
    resolved: bool


def verifier_command() -> str:
    return str(yaml.safe_load((EXAMPLE / "protocol.yaml").read_text())["verifier"]["command"])


def run_hidden_tests(task: Task, diff: str, scratch: Path) -> Verdict:
    """What the verifier decides about ``diff``: a fresh checkout of the fixture with the diff
    applied and the hidden tests laid over it, the protocol's command run in it (with this
    interpreter as `python`), its JUnit XML read, every FAIL_TO_PASS and PASS_TO_PASS test
    required to pass (a missing one fails)."""
    workspace = checkout(task, scratch / "workspace")
    if diff:
        (scratch / "attempt.diff").write_text(diff, encoding="utf-8")
        git(workspace, "apply", str(scratch / "attempt.diff"))
    hidden = EXAMPLE / task["tests"]
    shutil.copytree(hidden, workspace, dirs_exist_ok=True)
    tests = sorted(p.relative_to(hidden).as_posix() for p in hidden.rglob("*") if p.is_file())
    junit = scratch / "junit.xml"
    argv: list[str] = []
    for arg in shlex.split(verifier_command()):
        argv += tests if arg == "{tests}" else [arg.replace("{junit}", str(junit))]
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    subprocess.run(argv, cwd=workspace, env=env, capture_output=True, check=False,
                   timeout=SOLVER_TIMEOUT_SEC)
    passed = {f"{case.classname.replace('.', '/')}.py::{case.name}": case.is_passed
              for suite in JUnitXml.fromfile(str(junit)) for case in suite}
    listed = [*task["fail_to_pass"], *task["pass_to_pass"]]
    return Verdict(passed, all(passed.get(test_id, False) for test_id in listed))
