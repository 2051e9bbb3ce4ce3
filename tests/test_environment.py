"""The sealed environment (src/sealbench/environment.py; docs/protocol.md#the-environment).

Every build here is real — a venv made by a real interpreter, pip installing a real wheel — and
offline: the wheels are written by the test (tests/env_helpers.py) and pip is given
`--no-index --find-links`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from env_helpers import make_wheel, tiny_package
from hostile_helpers import hostile_report, records
from toy import make_protocol

from sealbench import environment
from sealbench.environment import (
    BUILD_NAME,
    FREEZE,
    MARKER,
    BuiltEnvironment,
    EnvironmentRecord,
    build,
    environment_digest,
    sandbox_view,
)
from sealbench.errors import BadInput, Refused
from sealbench.harness import Harness
from sealbench.ledger import Ledger
from sealbench.protocol import LOCK_FILE, EnvironmentSpec
from sealbench.sandbox import Sandbox
from sealbench.sealing import derive_identity, seal, verify

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
REQUIREMENTS = b"tinypkg==1.0\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own, empty at the start."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SEALBENCH_CACHE", str(root))
    return root


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    directory = tmp_path / "wheels"
    tiny_package(directory)
    return directory


def spec(python: str | None = PY) -> EnvironmentSpec:
    return EnvironmentSpec(python=python, requirements="requirements.txt")


def envs_of(cache: Path) -> tuple[list[Path], list[Path]]:
    """The cache's links and real build directories."""
    entries = sorted((cache / "envs").iterdir())
    return [p for p in entries if p.is_symlink()], [p for p in entries if not p.is_symlink()]


def with_environment(proto: Path, requirements: bytes = REQUIREMENTS,
                     python: str | None = PY) -> Path:
    """Give a toy protocol an `environment` section and its requirements file."""
    pinned = f'  python: "{python}"\n' if python else ""
    with (proto / "protocol.yaml").open("a") as handle:
        handle.write(f"environment:\n{pinned}  requirements: ./requirements.txt\n")
    (proto / "requirements.txt").write_bytes(requirements)
    return proto


def in_env(built: BuiltEnvironment, code: str) -> str:
    return subprocess.run([str(built.bin / "python"), "-c", code], capture_output=True,
                          text=True, check=True).stdout.strip()


# --------------------------------------------------------------------------- digest and view


def test_digest_names_the_python_line_and_the_requirement_bytes() -> None:
    base = environment_digest("3.11", REQUIREMENTS)
    assert base == environment_digest("3.11", REQUIREMENTS)
    assert base != environment_digest("3.12", REQUIREMENTS)
    assert base != environment_digest("3.11", REQUIREMENTS + b"# same package, other bytes\n")


def test_sandbox_view_puts_the_venv_first_on_path_and_binds_it(tmp_path: Path) -> None:
    record = EnvironmentRecord(python=PY, python_full="x", requirements_sha256="0",
                               digest="0")
    built = BuiltEnvironment(tmp_path / "venv", record, Path("/opt/python"))
    env = {"PATH": "/usr/bin", "PYTHONHOME": "/elsewhere", "HOME": "/tmp"}
    view, runtime = sandbox_view(built, env, (Path("/srv/agent"),))
    assert view["PATH"] == f"{tmp_path / 'venv' / 'bin'}:/usr/bin"
    assert view["VIRTUAL_ENV"] == str(tmp_path / "venv")
    assert "PYTHONHOME" not in view and view["HOME"] == "/tmp"
    assert runtime == (Path("/srv/agent"), tmp_path / "venv", Path("/opt/python"))
    assert sandbox_view(None, env, ()) == (env, ())
    under_usr = BuiltEnvironment(tmp_path / "venv", record, Path("/usr"))
    assert under_usr.mounts == (tmp_path / "venv",)  # the sandbox has /usr already


# --------------------------------------------------------------------------- building


@pytest.mark.slow
def test_build_installs_from_local_wheels_offline_and_records_the_freeze(
        cache: Path, wheels: Path) -> None:
    built = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    assert in_env(built, "import sys, tinypkg; print(tinypkg.VALUE, sys.prefix)") == \
        f"tinypkg 1.0 {built.path}"
    assert (built.path / FREEZE).read_text() == "tinypkg==1.0\n" == built.freeze
    assert built.record.python == PY
    assert built.record.python_full == ".".join(map(str, sys.version_info[:3]))
    assert built.record.digest == environment_digest(PY, REQUIREMENTS)
    [link], [real] = envs_of(cache)
    assert link.name == built.record.digest and link.resolve() == real == built.path
    assert BUILD_NAME.match(real.name)
    assert Path(sys.base_prefix) in built.mounts or sys.base_prefix.startswith("/usr")


@pytest.mark.slow
def test_omitted_python_is_the_one_sealbench_runs_under(cache: Path, wheels: Path) -> None:
    built = build(spec(python=None), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    assert built.record.python == PY
    assert in_env(built, "import sys; print(sys.version_info[:2])") == \
        str(tuple(sys.version_info[:2]))


@pytest.mark.slow
def test_a_second_build_reuses_the_cached_environment_without_running_pip(
        cache: Path, wheels: Path) -> None:
    first = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    marker = (first.path / MARKER).stat().st_mtime_ns
    shutil.rmtree(wheels)  # a pip run now would find nothing to install
    second = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=None)
    assert second == first
    assert (second.path / MARKER).stat().st_mtime_ns == marker
    assert len(envs_of(cache)[1]) == 1


def test_a_bad_requirement_is_one_line_naming_the_field_and_pips_error(
        cache: Path, wheels: Path) -> None:
    with pytest.raises(BadInput) as caught:
        build(spec(), b"nosuchpkg==1.0\n", cache_dir=cache, find_links=wheels)
    [line] = caught.value.lines()
    assert line == ("protocol.yaml: field 'environment.requirements': pip install failed: "
                    "ERROR: No matching distribution found for nosuchpkg==1.0")
    assert envs_of(cache) == ([], [])  # nothing half-built is left


def test_a_relative_path_in_the_requirements_reaches_nothing_unsealed(
        cache: Path, wheels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-r other.txt` or `./pkg` would install bytes the seal does not cover: pip runs in a
    scratch directory, so they are not found, wherever sealbench was started."""
    (tmp_path / "other.txt").write_text("tinypkg==1.0\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match=r"environment\.requirements.*other\.txt"):
        build(spec(), b"-r other.txt\n", cache_dir=cache, find_links=wheels)


def test_a_missing_python_line_is_refused_naming_the_field(cache: Path) -> None:
    with pytest.raises(Refused) as caught:
        build(spec(python="3.99"), REQUIREMENTS, cache_dir=cache)
    assert caught.value.lines() == [
        f"protocol.yaml: field 'environment.python': Python 3.99 is wanted, but sealbench runs "
        f"under {PY} and there is no python3.99 on PATH"]


@pytest.mark.slow
def test_a_killed_build_is_never_used_and_the_next_build_removes_it(
        cache: Path, wheels: Path) -> None:
    script = textwrap.dedent(f"""
        from pathlib import Path
        from sealbench.environment import build
        from sealbench.protocol import EnvironmentSpec
        build(EnvironmentSpec(python={PY!r}, requirements="r.txt"), {REQUIREMENTS!r},
              cache_dir=Path({str(cache)!r}), find_links=Path({str(wheels)!r}))
    """)
    builder = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    envs = cache / "envs"
    deadline = time.monotonic() + 60
    while not (envs.is_dir() and any(BUILD_NAME.match(p.name) for p in envs.iterdir())):
        assert builder.poll() is None and time.monotonic() < deadline, "the build never began"
        time.sleep(0.002)
    os.killpg(builder.pid, signal.SIGKILL)  # the builder and its pip, as a terminal would
    builder.wait()
    links, [half] = envs_of(cache)
    assert links == [] and not (half / MARKER).exists()
    built = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    assert built.path != half and not half.exists()
    assert envs_of(cache)[1] == [built.path]


@pytest.mark.slow
def test_concurrent_builds_publish_one_environment_and_both_use_it(
        cache: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both builds are held until both are complete, so both reach publication: exactly one
    link is made, and the loser removes its own copy and returns the winner's."""
    together = threading.Barrier(2, timeout=120)
    real_make = environment._make

    def make_then_wait(*args: object, **kwargs: object) -> None:
        real_make(*args, **kwargs)  # type: ignore[arg-type]
        together.wait()

    monkeypatch.setattr(environment, "_make", make_then_wait)
    results: list[BuiltEnvironment | BaseException] = []

    def one() -> None:
        try:
            results.append(build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels))
        except BaseException as exc:  # handed to the test thread
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = results
    assert isinstance(first, BuiltEnvironment) and first == second
    links, reals = envs_of(cache)
    assert len(links) == 1 and reals == [first.path]


# Two test sessions' workers (pytest-xdist) or two sealbench processes share one cache: each
# builder holds after its build until the other has built too, so both reach publication.
CONCURRENT_BUILDER = """
import json, sys, time
from pathlib import Path
from sealbench import environment
from sealbench.protocol import EnvironmentSpec

cache, wheels, meeting, me = (Path(a) for a in sys.argv[1:5])
real_make = environment._make

def make_then_wait(*args, **kwargs):
    real_make(*args, **kwargs)
    (meeting / me.name).touch()
    deadline = time.monotonic() + 120
    while len(list(meeting.iterdir())) < 2:
        if time.monotonic() > deadline:
            raise SystemExit("the other builder never finished its build")
        time.sleep(0.01)

environment._make = make_then_wait
built = environment.build(EnvironmentSpec(python=sys.argv[5], requirements="r.txt"),
                          sys.argv[6].encode(), cache_dir=cache, find_links=wheels)
print(json.dumps({"path": str(built.path), "digest": built.record.digest}))
"""


@pytest.mark.slow
def test_two_processes_building_at_once_publish_one_environment(
        cache: Path, wheels: Path, tmp_path: Path) -> None:
    """What two pytest-xdist workers sharing the session's cache do (tests/conftest.py), and
    two sealbench runs on one machine: both complete a build, exactly one is published by the
    atomic link, the other removes its copy and uses the published one."""
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    builders = [subprocess.Popen(
        [sys.executable, "-c", CONCURRENT_BUILDER, str(cache), str(wheels), str(meeting),
         str(tmp_path / f"builder{i}"), PY, REQUIREMENTS.decode()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [builder.communicate(timeout=300) for builder in builders]
    for builder, (_, err) in zip(builders, outputs, strict=True):
        assert builder.returncode == 0, err
    first, second = (json.loads(out) for out, _ in outputs)
    assert first == second
    assert sorted(p.name for p in meeting.iterdir()) == ["builder0", "builder1"]  # both built
    links, reals = envs_of(cache)
    assert [link.name for link in links] == [first["digest"]]
    assert reals == [Path(first["path"])]
    assert in_env(build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels),
                  "import tinypkg; print(tinypkg.VALUE)") == "tinypkg 1.0"


@pytest.mark.slow
def test_a_changed_cached_environment_is_refused_with_the_change_named(
        cache: Path, wheels: Path) -> None:
    built = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    make_wheel(wheels, "otherpkg", "2.0", {"otherpkg/__init__.py": ""})
    subprocess.run([sys.executable, "-m", "pip", "--python", str(built.bin / "python"),
                    "install", "-q", "--no-index", "--find-links", str(wheels), "otherpkg"],
                   check=True, capture_output=True)
    with pytest.raises(Refused) as caught:
        build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    [line] = caught.value.lines()
    assert "differs from the one built (installed distributions changed: +otherpkg==2.0)" in line
    assert f"rm -rf {cache / 'envs' / built.record.digest} {built.path}" in line


@pytest.mark.slow
def test_a_removed_environment_directory_is_built_again(cache: Path, wheels: Path) -> None:
    first = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    shutil.rmtree(first.path)  # the link is left dangling
    second = build(spec(), REQUIREMENTS, cache_dir=cache, find_links=wheels)
    assert second.path != first.path and second.record.digest == first.record.digest
    assert in_env(second, "import tinypkg; print(tinypkg.VALUE)") == "tinypkg 1.0"


# --------------------------------------------------------------------------- sealing


@pytest.mark.slow
def test_seal_records_the_environment_in_the_lock_and_the_identity(
        tmp_path: Path, wheels: Path) -> None:
    proto = with_environment(make_protocol(tmp_path / "proto"))
    result = seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), find_links=wheels)
    lock = json.loads((proto / LOCK_FILE).read_text())
    record = EnvironmentRecord.model_validate(lock["environment"])
    assert record.python == PY and record.digest == environment_digest(PY, REQUIREMENTS)
    assert {"path": "requirements.txt", "role": "environment"}.items() <= next(
        f for f in lock["files"] if f["path"] == "requirements.txt").items()
    sealed = verify(proto)
    assert sealed.lock.environment == record
    assert derive_identity(sealed.protocol.spec, sealed.lock.files, record) == result.identity
    assert derive_identity(sealed.protocol.spec, sealed.lock.files) != result.identity


@pytest.mark.slow
def test_a_lock_whose_environment_record_was_removed_is_refused(
        tmp_path: Path, wheels: Path) -> None:
    proto = with_environment(make_protocol(tmp_path / "proto"))
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), find_links=wheels)
    lock = json.loads((proto / LOCK_FILE).read_text())
    del lock["environment"]
    (proto / LOCK_FILE).write_text(json.dumps(lock))
    with pytest.raises(Refused) as caught:
        verify(proto)
    assert caught.value.lines() == [f"{LOCK_FILE}: has no environment record (altered)"]


@pytest.mark.slow
def test_seal_fails_on_a_requirement_that_does_not_install_one_line_exit_2(
        tmp_path: Path, wheels: Path, cli) -> None:  # type: ignore[no-untyped-def]
    proto = with_environment(make_protocol(tmp_path / "proto"), b"nosuchpkg==1.0\n")
    result = cli("seal", proto, "--find-links", wheels, "--ledger", tmp_path / "l.sqlite")
    assert result.exit_code == 2
    assert result.stderr == ("sealbench: protocol.yaml: field 'environment.requirements': pip "
                             "install failed: ERROR: No matching distribution found for "
                             "nosuchpkg==1.0\n")
    assert not (proto / LOCK_FILE).exists()


def test_seal_refuses_a_python_line_this_machine_lacks_exit_3(
        tmp_path: Path, wheels: Path, cli) -> None:  # type: ignore[no-untyped-def]
    proto = with_environment(make_protocol(tmp_path / "proto"), python="3.99")
    result = cli("seal", proto, "--find-links", wheels, "--ledger", tmp_path / "l.sqlite")
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1
    assert "field 'environment.python': Python 3.99 is wanted" in result.stderr


def _sealed_identity(tmp_path: Path, name: str, wheels: Path,
                     edit: Callable[[Path], None] = lambda _p: None,
                     python: str | None = PY) -> str:
    proto = with_environment(make_protocol(tmp_path / name), python=python)
    edit(proto)
    return seal(proto, ledger=Ledger(tmp_path / f"{name}.sqlite"), find_links=wheels).identity


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_budget_and_environment_changes_each_change_the_identity(
        tmp_path: Path, wheels: Path) -> None:
    """Issue 10, acceptance 6 (budget and environment; the verifier's is in its own tests)."""
    base = _sealed_identity(tmp_path, "base", wheels)
    assert _sealed_identity(tmp_path, "same", wheels) == base  # content, not location
    budget = _sealed_identity(tmp_path, "budget", wheels, lambda p: _replace(
        p / "protocol.yaml", "timeout_sec: 20", "timeout_sec: 21"))
    requirements = _sealed_identity(tmp_path, "reqs", wheels, lambda p: (
        p / "requirements.txt").write_bytes(REQUIREMENTS + b"# same package, other bytes\n"))
    unpinned = _sealed_identity(tmp_path, "unpinned", wheels, python=None)
    assert len({base, budget, requirements, unpinned}) == 4


def _other_python() -> tuple[str, Path] | None:
    """Another Python 3 line that runs here, and the directory holding its `python3.N`."""
    candidates = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    candidates += sorted((Path.home() / ".pyenv" / "versions").glob("3.*/bin"))
    for minor in range(10, 20):
        line = f"3.{minor}"
        if line == PY:
            continue
        for directory in candidates:
            exe = directory / f"python{line}"
            if exe.is_file() and subprocess.run([exe, "-c", ""], capture_output=True,
                                                check=False).returncode == 0:
                return line, directory
    return None


@pytest.mark.slow
def test_the_python_line_changes_the_identity_and_the_interpreter(
        tmp_path: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = _other_python()
    if other is None:
        pytest.skip("no second Python 3 line runs on this machine")
    line, directory = other
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    base = _sealed_identity(tmp_path, "base", wheels)
    moved = _sealed_identity(tmp_path, "moved", wheels, python=line)
    assert moved != base
    built = build(spec(python=line), REQUIREMENTS, cache_dir=Path(os.environ["SEALBENCH_CACHE"]))
    assert built.record.python == line
    assert in_env(built, "import sys, tinypkg; print(sys.version_info[:2])") == \
        str(tuple(int(v) for v in line.split(".")))


@pytest.mark.slow
def test_the_harness_refuses_an_environment_other_than_the_sealed_one(
        tmp_path: Path, wheels: Path) -> None:
    proto = with_environment(make_protocol(tmp_path / "proto"))
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), find_links=wheels)
    sealed = verify(proto)
    assert sealed.lock.environment is not None
    other = sealed.lock.environment.model_copy(update={"digest": "0" * 64})
    with pytest.raises(Refused, match=r"^environment differs from the sealed one"):
        Harness(sealed.protocol, sealed.lock.sealed_files(), Sandbox("none"),
                environment=other, find_links=wheels)
    with Harness(sealed.protocol, sealed.lock.sealed_files(), Sandbox("none"),
                 environment=sealed.lock.environment) as harness:
        assert harness.environment is not None
        assert harness.context.environment == harness.environment


# --------------------------------------------------------------------------- in the sandbox

PROBE = """
import glob, shutil, subprocess
venv = os.environ.get("VIRTUAL_ENV", "")
probe = subprocess.run(["python", "-c", "import sys, tinypkg; print(tinypkg.VALUE, sys.prefix)"],
                       capture_output=True, text=True)
site = (glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")) or [venv])[0]
writes = {}
for name, target, mode in (("venv", os.path.join(venv, "planted"), "w"),
                           ("site-packages", os.path.join(site, "planted.py"), "w"),
                           ("module", os.path.join(site, "tinypkg", "__init__.py"), "a")):
    try:
        with open(target, mode) as handle:
            handle.write("planted = 1\\n")
        writes[name] = "written"
    except OSError as exc:
        writes[name] = exc.strerror
report(venv=venv, which=shutil.which("python"), probe=probe.stdout.strip(),
       probe_err=probe.stderr[-500:], writes=writes)
"""


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_solver_in_bwrap_runs_the_environment_and_cannot_write_into_it(
        tmp_path: Path, cache: Path, wheels: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Sealed with one cache, run with an empty one: the run builds the environment itself
    from --find-links, and its solver finds it first on PATH, read-only."""
    from hostile_helpers import hostile_solver

    proto = with_environment(make_protocol(tmp_path / "proto", n=3))
    shutil.rmtree(tmp_path / ".scratch-proto")
    ledger_path = tmp_path / "ledger" / "ledger.sqlite"
    seal(proto, ledger=Ledger(ledger_path), find_links=wheels)
    shutil.rmtree(cache)
    solver = hostile_solver(tmp_path / "solver", before=PROBE)
    result = cli("run", proto, "--solver", solver, "--sandbox", "bwrap", "--run-id", "env-run",
                 "--find-links", wheels, "--ledger", ledger_path)
    assert result.exit_code == 0, result.output + result.stderr
    [_link], [real] = envs_of(cache)
    ledger = Ledger(ledger_path)
    for task_id, record in records(ledger, "env-run").items():
        facts = hostile_report(ledger, record)
        assert facts["venv"] == str(real), task_id
        assert facts["which"] == str(real / "bin" / "python")
        assert facts["probe"] == f"tinypkg 1.0 {real}", facts["probe_err"]
        assert facts["writes"] == dict.fromkeys(("venv", "site-packages", "module"),
                                                "Read-only file system"), facts["writes"]
    assert not list(real.rglob("planted*"))
    assert build(spec(), REQUIREMENTS, cache_dir=cache).path == real  # unchanged: not refused


ENV_HIDDEN = """\
import os
import subprocess

from calc import add, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2
    venv = os.environ["VIRTUAL_ENV"]
    probe = "import sys, tinypkg; print(tinypkg.VALUE, sys.prefix)"
    found = subprocess.run(["python", "-c", probe], capture_output=True, text=True)
    assert found.stdout.strip() == f"tinypkg 1.0 {venv}", found.stderr
    try:
        open(os.path.join(venv, "planted"), "w").close()
    except OSError as exc:
        assert exc.strerror == "Read-only file system"
    else:
        raise AssertionError("the verifier wrote into the environment")
"""


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_verifier_in_bwrap_runs_in_the_same_environment_read_only(
        tmp_path: Path, cache: Path, wheels: Path) -> None:
    """The hidden PASS_TO_PASS test passes only where the environment is first on PATH and
    cannot be written: the seal's oracle runs through the verifier prove both."""
    from toy import make_tested_protocol

    proto = make_tested_protocol(tmp_path / "proto", n=3,
                                 hidden={f"calc-{i:03d}": ENV_HIDDEN for i in range(3)})
    with_environment(proto)
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), sandbox="bwrap", find_links=wheels)
    [_link], [real] = envs_of(cache)
    assert not list(real.rglob("planted"))
