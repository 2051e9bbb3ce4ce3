"""The solver contract, emulated without a sandbox, for testing the example and its solvers.

Each attempt gets what the harness gives a solver: the fixture committed in a fresh git
repository, a read-only prompt file outside it, a refuse file, and the SEALBENCH_*
environment. The result is the workspace diff computed with neutral git config, scored by
the example's own metric module.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "src" / "sealbench" / "example" / "coding-repair"
GENERATOR = ROOT / "tools" / "gen_example.py"
SOLVER_TIMEOUT_SEC = 60

Task = dict[str, Any]


def load_tasks(relative: str) -> list[Task]:
    lines = (EXAMPLE / relative).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def dataset() -> list[Task]:
    return load_tasks("tasks/repair_v1.jsonl")


def null_pack() -> dict[str, Task]:
    return {task["id"]: task for task in load_tasks("tasks/null_pack_v1.jsonl")}


def load_module_from(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@cache
def metric() -> ModuleType:
    return load_module_from(EXAMPLE / "metric_exact_diff.py", "example_metric")


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
