"""The solver's environment (issue 11): only named variables pass, HOME is private per attempt
and may be seeded, per-task timeouts, bare program names resolved before the run."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from toy import SOLVER, make_protocol, write_solver

from sealbench.ledger import Ledger
from sealbench.protocol import Task
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.solver import BASE_ENV, Workspace, attempt_timeout, solver_environment

SENTINEL = "sk-sentinel-7f3a9c0e-do-not-record"
OWN = {"HOME", "SEALBENCH_TASK_ID", "SEALBENCH_PROMPT_FILE", "SEALBENCH_REFUSE_FILE",
       "SEALBENCH_WORKSPACE", "PYTHONDONTWRITEBYTECODE"}

# a report of what the solver found (never the key itself: a hash of it), then the toy solver
PROBE = '''
import hashlib, json, os, sys, time
key = os.environ.get("OPENAI_API_KEY")
home = os.environ["HOME"]
before = sorted(os.listdir(home))
config = os.path.join(home, ".config", "agent", "config.toml")
seeded = open(config).read() if os.path.exists(config) else None
if seeded is not None:
    open(config, "w").write("changed by " + sys.argv[-1])
open(os.path.join(home, "mark-" + sys.argv[-1]), "w").write("x")
if sys.argv[-1] == "toy-001" and os.environ.get("SLOW_TOY_001"):
    time.sleep(4)
print("PROBE " + json.dumps({
    "key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else None,
    "names": sorted(os.environ), "home": home, "home_before": before, "seeded": seeded,
    "prefix": sys.prefix}))
''' + SOLVER


def _workspace(tmp_path: Path) -> Workspace:
    return Workspace(root=tmp_path / "ws", prompt_file=tmp_path / "prompt.txt",
                     refuse_file=tmp_path / "out" / "refuse.txt", attempt_id="attempt-1",
                     home=tmp_path / "home")


@pytest.mark.parametrize(("host", "names", "passed"), [
    ({"PATH": "/bin", "OPENAI_API_KEY": "k", "AWS_SECRET": "s"}, (), {"PATH": "/bin"}),
    ({"PATH": "/bin", "OPENAI_API_KEY": "k"}, ("OPENAI_API_KEY",),
     {"PATH": "/bin", "OPENAI_API_KEY": "k"}),
    ({"LANG": "C.UTF-8", "TZ": "UTC", "TERM": "xterm", "USER": "me"}, (),
     {"PATH": os.defpath, "LANG": "C.UTF-8", "TZ": "UTC"}),
    ({"PATH": "/bin"}, ("NOT_SET_ON_HOST",), {"PATH": "/bin"}),
    ({"PATH": "/bin", "HOME": "/root", "SEALBENCH_LEDGER": "/l", "SEALBENCH_TASK_ID": "x"},
     (), {"PATH": "/bin"}),
], ids=["unnamed-dropped", "named-passed", "base-only", "unset-skipped", "own-overridden"])
def test_solver_environment_is_built_from_nothing(tmp_path: Path, host: dict[str, str],
                                                  names: tuple[str, ...],
                                                  passed: dict[str, str]) -> None:
    ws = _workspace(tmp_path)
    env = solver_environment(host, names, ws)
    assert {k: v for k, v in env.items() if k not in OWN} == passed
    assert env["HOME"] == str(ws.home) and env["SEALBENCH_TASK_ID"] == "attempt-1"
    assert set(env) - OWN <= {*BASE_ENV, *names}


@pytest.mark.parametrize(("task_timeout", "scale", "expected"), [
    (None, 1.0, 20.0), (None, 2.0, 40.0), (1.5, 1.0, 1.5), (1.5, 2.0, 3.0), (300, 0.5, 150.0),
])
def test_a_task_timeout_overrides_the_budget_and_is_scaled(task_timeout: float | None,
                                                           scale: float,
                                                           expected: float) -> None:
    task = Task(id="t", kind="dataset", oracle=Path("o"), repo=None, prompt="", stratum=None,
                cluster=None, forbidden=(), expected_class=None, source="d", line=1,
                timeout_sec=task_timeout)
    # attempt_timeout reads these two fields of the run's AttemptContext, nothing else
    ctx = SimpleNamespace(timeout=20.0 * scale, timeout_scale=scale)
    assert attempt_timeout(task, ctx) == expected  # type: ignore[arg-type]


# --------------------------------------------------------------------------- whole runs


def _probes(ledger: Ledger, run_id: str) -> dict[str, dict[str, Any]]:
    """What the probe reported, per task id (controls included)."""
    found = {}
    for attempt in ledger.attempts(run_id):
        out = ledger.get_artifact(attempt.record["stdout"]).decode()
        line = next(x for x in out.splitlines() if x.startswith("PROBE "))
        found[attempt.task_id] = json.loads(line[len("PROBE "):])
    return found


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.mark.sandbox
def test_only_named_variables_pass_and_only_their_names_are_recorded(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Acceptance 3 of issue 11."""
    proto = make_protocol(tmp_path / "proto")
    ledger_path = tmp_path / "ledger" / "ledger.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    command = write_solver(tmp_path / "agent", PROBE)
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    monkeypatch.setenv("UNNAMED_SECRET", SENTINEL)
    given = cli("run", proto, "--solver", command, "--env", "OPENAI_API_KEY", "--run-id",
                "with", "--ledger", ledger_path)
    assert given.exit_code == 0, given.stderr
    plain = cli("run", proto, "--solver", command, "--run-id", "without", "--ledger",
                ledger_path)
    assert plain.exit_code == 0, plain.stderr

    ledger = Ledger(ledger_path)
    with_key, without = _probes(ledger, "with"), _probes(ledger, "without")
    assert len(with_key) == len(without) == 7
    digest = hashlib.sha256(SENTINEL.encode()).hexdigest()
    assert {p["key_sha256"] for p in with_key.values()} == {digest}
    assert {p["key_sha256"] for p in without.values()} == {None}
    for probe in [*with_key.values(), *without.values()]:
        # PWD: bubblewrap's --chdir sets it to the workspace
        assert set(probe["names"]) - OWN <= {*BASE_ENV, "PWD", "OPENAI_API_KEY"}, probe["names"]
    assert ledger.run("with").options["env_names"] == ["OPENAI_API_KEY"]
    assert ledger.run("without").options["env_names"] == []
    report = json.loads(cli("report", "with", "--ledger", ledger_path).stdout)
    assert report["solver"]["env_names"] == ["OPENAI_API_KEY"]
    # the value is nowhere: not in the SQLite file, its journal, the artifacts, the reports
    assert _files_holding(ledger_path.parent, SENTINEL.encode()) == []


def test_a_named_variable_that_is_not_set_is_refused_before_the_run(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = cli("run", proto, "--solver", write_solver(tmp_path / "agent"), "--env",
                 "OPENAI_API_KEY", "--ledger", ledger.path)
    assert result.exit_code == 2
    assert result.stderr == ("sealbench: --env OPENAI_API_KEY: not set in this environment; "
                             "set it (or drop --env) so the run does not silently lack it\n")
    bad = cli("run", proto, "--solver", write_solver(tmp_path / "agent"), "--env", "HOME",
              "--ledger", ledger.path)
    assert bad.exit_code == 2 and "'HOME' is set by sealbench itself" in bad.stderr
    assert ledger.runs() == []


@pytest.mark.sandbox
def test_the_protocols_solver_env_passes_and_must_be_set(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = make_protocol(tmp_path / "proto")
    (proto / "protocol.yaml").write_text((proto / "protocol.yaml").read_text()
                                         + "  env: [AGENT_MODEL]\n")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent", PROBE)
    monkeypatch.delenv("AGENT_MODEL", raising=False)
    unset = cli("run", proto, "--solver", command, "--ledger", ledger.path)
    assert unset.exit_code == 2
    assert unset.stderr == ("sealbench: protocol.sealed.yaml: field 'solver.env': AGENT_MODEL "
                            "is not set in this environment; the protocol's solver needs it\n")
    monkeypatch.setenv("AGENT_MODEL", "scripted")
    result = run(proto, command, ledger=ledger)
    assert all("AGENT_MODEL" in p["names"] for p in _probes(ledger, result.run_id).values())
    assert ledger.run(result.run_id).options["env_names"] == ["AGENT_MODEL"]


@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=pytest.mark.sandbox), "none"])
def test_home_is_private_to_each_attempt(tmp_path: Path, sandbox: str) -> None:
    """No attempt sees what another wrote to HOME, and nothing of it stays on the host."""
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = run(proto, write_solver(tmp_path / "agent", PROBE), ledger=ledger,
                 options=RunOptions(jobs=1, sandbox=sandbox))  # type: ignore[arg-type]
    probes = _probes(ledger, result.run_id)
    assert [p["home_before"] for p in probes.values()] == [[]] * 7
    homes = {p["home"] for p in probes.values()}
    assert len(homes) == 7 and "/tmp" not in homes
    assert not any(Path(h).exists() for h in homes)
    assert all(r.record["outcome"] == "pass" for r in ledger.attempts(result.run_id, "dataset"))


HOME_FILLER = '''
import os, sys
if sys.argv[-1] == "toy-001":
    open(os.path.join(os.environ["HOME"], "cache.bin"), "wb").write(b"x" * 200_000)
''' + SOLVER


@pytest.mark.sandbox
def test_a_home_past_the_workspace_budget_is_a_violation(tmp_path: Path) -> None:
    """HOME is not diffed, but it is disk: it may not grow past budget.max_workspace_bytes."""
    proto = make_protocol(tmp_path / "proto")
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(text.replace(
        "  max_files_touched: 3\n", "  max_files_touched: 3\n  max_workspace_bytes: 150000\n"))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = run(proto, write_solver(tmp_path / "agent", HOME_FILLER), ledger=ledger,
                 options=RunOptions(jobs=2))
    rows = {r.task_id: r.record for r in ledger.attempts(result.run_id, "dataset")}
    assert rows["toy-001"]["outcome"] == "violation"
    assert rows["toy-001"]["detail"] == ("HOME grew to 200000 bytes, past "
                                         "budget.max_workspace_bytes (150000) beyond its seed (0)")
    assert {rows[t]["outcome"] for t in ("toy-000", "toy-002", "toy-003")} == {"pass"}


@pytest.mark.sandbox
def test_home_from_seeds_every_attempt_and_is_never_written(tmp_path: Path) -> None:
    from sealbench.homeseed import read_home_seed

    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "ledger" / "l.sqlite")
    seal(proto, ledger=ledger)
    seed = tmp_path / "agent-home"
    (seed / ".config" / "agent").mkdir(parents=True)
    (seed / ".config" / "agent" / "config.toml").write_text("model = 'scripted'\n")
    os.symlink("/etc/hostname", seed / "link")
    before = read_home_seed(seed)
    result = run(proto, write_solver(tmp_path / "agent", PROBE), ledger=ledger,
                 options=RunOptions(jobs=2, home_from=seed))
    probes = _probes(ledger, result.run_id)
    # each attempt changed its own copy; every one still began with the seed's content
    assert {p["seeded"] for p in probes.values()} == {"model = 'scripted'\n"}
    assert {tuple(p["home_before"]) for p in probes.values()} == {(".config", "link")}
    assert read_home_seed(seed) == before
    assert sorted(p.name for p in seed.rglob("*")) == [".config", "agent", "config.toml",
                                                       "link"]
    assert ledger.run(result.run_id).options["home_from"] == before.header()
    assert result.report["solver"]["home_from"]["sha256"] == before.digest


def test_home_from_inside_the_ledger_dir_or_missing_is_refused(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "ledger" / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent")
    inside = proto / "fixtures"
    result = cli("run", proto, "--solver", command, "--home-from", inside, "--ledger",
                 ledger.path)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"sealbench: --home-from {inside}: lies inside the "
                                    "protocol directory")
    missing = cli("run", proto, "--solver", command, "--home-from", tmp_path / "nope",
                  "--ledger", ledger.path)
    assert missing.exit_code == 2 and "not an existing directory" in missing.stderr
    assert ledger.runs() == []


@pytest.mark.sandbox
def test_a_task_timeout_kills_that_task_at_its_own_scaled_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = make_protocol(tmp_path / "proto", timeout=30)
    dataset = proto / "tasks" / "dataset.jsonl"
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    rows[1]["timeout_sec"] = 1
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    monkeypatch.setenv("SLOW_TOY_001", "1")
    result = run(proto, write_solver(tmp_path / "agent", PROBE), ledger=ledger,
                 options=RunOptions(jobs=2, timeout_scale=2, env=("SLOW_TOY_001",)))
    rows_by_id = {r.task_id: r.record for r in ledger.attempts(result.run_id, "dataset")}
    assert rows_by_id["toy-001"]["outcome"] == "timeout"
    assert rows_by_id["toy-001"]["detail"] == "killed after 2 s"
    assert rows_by_id["toy-001"]["duration"] < 3.9
    assert {rows_by_id[t]["outcome"] for t in ("toy-000", "toy-002", "toy-003")} == {"pass"}


# --------------------------------------------------------------------------- bare names


@pytest.mark.sandbox
def test_a_bare_program_in_a_hidden_directory_is_refused_in_one_line(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Acceptance 7: `python` first on PATH lies in a directory the sandbox hides; without the
    check another `python` would run inside, silently."""
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    hidden = tmp_path / "private-bin"
    hidden.mkdir()
    os.symlink(sys.executable, hidden / "python")
    monkeypatch.setenv("PATH", f"{hidden}{os.pathsep}{os.environ['PATH']}")
    script = Path(write_solver(tmp_path / "agent").split(" ", 1)[1])
    result = cli("run", proto, "--solver", f"python {script}", "--hide", hidden, "--ledger",
                 ledger.path)
    assert result.exit_code == 2
    assert result.stderr == (f"sealbench: --solver: 'python' resolves to {hidden}/python, "
                             f"which lies inside {hidden} (--hide), hidden from the solver by "
                             "the sandbox; name a program outside it by its full path\n")
    assert ledger.runs() == []


def test_a_bare_program_not_found_is_refused_before_the_run(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = cli("run", proto, "--solver", "no-such-agent-4711 --fast", "--sandbox", "none",
                 "--ledger", ledger.path)
    assert result.exit_code == 2
    warning, error = result.stderr.splitlines()  # the warning says: no sandbox
    assert warning.startswith("warning: running WITHOUT a sandbox")
    assert error.startswith("sealbench: --solver: 'no-such-agent-4711' is not found on the "
                            "solver's PATH (")
    assert ledger.runs() == []


@pytest.mark.sandbox
def test_a_bare_python_on_path_runs_as_that_venvs_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "agent-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    script = Path(write_solver(tmp_path / "agent", PROBE).split(" ", 1)[1])
    result = run(proto, f"python {script}", ledger=ledger, options=RunOptions(jobs=2))
    assert {p["prefix"] for p in _probes(ledger, result.run_id).values()} == {str(venv)}
    header = ledger.run(result.run_id)
    assert header.solver == f"python {script}"  # what the user typed: resume compares it
    assert header.options["solver_argv"] == [str(venv / "bin" / "python"), str(script)]


@pytest.mark.sandbox
def test_a_resume_passes_the_runs_own_variables_and_refuses_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after its first attempt, the run resumes with the names it began with (not
    given again), and only with those."""
    from sealbench.errors import BadInput, Refused
    from sealbench.runner import RunControl, RunInterrupted, resume

    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent", PROBE)
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    control = RunControl()

    def stop_after_one(kind: str, _data: dict[str, Any]) -> None:
        if kind == "attempt":
            control.stop.set()

    with pytest.raises(RunInterrupted):
        run(proto, command, ledger=ledger, run_id="s1", control=control,
            on_event=stop_after_one, options=RunOptions(env=("OPENAI_API_KEY",)))
    with pytest.raises(Refused, match=r"began with the solver environment \['OPENAI_API_KEY'\]"):
        resume(proto, command, "s1", ledger=ledger, options=RunOptions(env=("OTHER",)))
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(BadInput, match=r"^--env OPENAI_API_KEY: not set"):
        resume(proto, command, "s1", ledger=ledger)
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    done = resume(proto, command, "s1", ledger=ledger)
    digest = hashlib.sha256(SENTINEL.encode()).hexdigest()
    assert {p["key_sha256"] for p in _probes(ledger, done.run_id).values()} == {digest}
    assert done.report["solver"]["env_names"] == ["OPENAI_API_KEY"]


def test_a_home_seed_the_scratch_disk_cannot_hold_is_one_line_and_no_run(
        tmp_path: Path) -> None:
    """A real write limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail with EFBIG, as on
    a full disk) stops the copy of --home-from into scratch: one line, exit 3, no traceback,
    no run recorded."""
    proto = make_protocol(tmp_path / "proto")
    ledger_path = tmp_path / "ledger" / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    seed = tmp_path / "agent-home"
    seed.mkdir()
    (seed / "big.bin").write_bytes(b"\0" * (4 << 20))
    limited = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
               "resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20)); "
               "from sealbench.cli import main; sys.argv[0] = 'sealbench'; main()")
    done = subprocess.run(
        [sys.executable, "-c", limited, "run", str(proto), "--solver",
         write_solver(tmp_path / "agent"), "--home-from", str(seed), "--ledger",
         str(ledger_path), "--sandbox", "none"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SEALBENCH_SCRATCH": str(tmp_path)})
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"sealbench: --home-from {seed}: cannot be copied into the "
                                f"scratch directory {tmp_path}: "), done.stderr
    assert "Traceback" not in done.stderr
    assert Ledger(ledger_path).runs() == []
