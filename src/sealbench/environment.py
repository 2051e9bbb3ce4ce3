"""The sealed environment: one virtual environment per (Python 3.N, requirements bytes), built
once into a cache and bound read-only into every sandbox (docs/protocol.md#the-environment).

A venv is not relocatable — console scripts carry the absolute path of their interpreter in
their `#!` line — so it is built where it will stay, `envs/<digest>.<pid>-<token>`, and
published by creating the symlink `envs/<digest>` to it, atomically, once it is complete (its
marker file is written last). Of two concurrent builds, one creates the link and the other
removes its own copy and uses the winner's; a build killed half-way never got a link, so it is
never used, and the next build removes it.

The installer is the pip of the interpreter sealbench runs under (`pip --python VENV`): the
venv itself is made `--without-pip`, so it holds exactly what the requirements install.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.errors import BadInput, Refused
from sealbench.ledger import canonical
from sealbench.protocol import PROTOCOL_FILE, EnvironmentSpec
from sealbench.sandbox import PRIVATE_DIRS, SYSTEM_DIRS

DIGEST_FORMAT: Final = "sealbench-environment/v1"
MARKER: Final = "sealbench-environment.json"  # written last: its presence means "complete"
FREEZE: Final = "sealbench-freeze.txt"
FIELD_PYTHON: Final = f"{PROTOCOL_FILE}: field 'environment.python'"
FIELD_REQUIREMENTS: Final = f"{PROTOCOL_FILE}: field 'environment.requirements'"
QUERY_TIMEOUT_SEC: Final = 60
# a build's own directory: `<digest>.<pid of the builder>-<token>`
BUILD_NAME = re.compile(r"^(?P<digest>[0-9a-f]{64})\.(?P<pid>[0-9]+)-[0-9a-z]+$")
# what a venv's interpreter reports about itself; -I: no PYTHONPATH, no user site
_QUERY = ("import json, sys; print(json.dumps({'executable': sys.executable, "
          "'base_prefix': sys.base_prefix, 'version': list(sys.version_info[:3])}))")
_DISTRIBUTIONS = ("import importlib.metadata as m, json; print(json.dumps(sorted("
                  "f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))")


class EnvironmentRecord(BaseModel):
    """What the lock keeps of a protocol's environment, and what enters its identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str  # "3.N": the interpreter line every build of this environment must use
    python_full: str  # "3.N.M" of the interpreter it was built with at seal time
    requirements_sha256: str
    digest: str  # environment_digest(python, requirements bytes): the cache key


def requirements_digest(python_minor: str, requirements_sha256: str) -> str:
    """The cache key from the requirements' sha256 (what `verify` has, from the lock)."""
    body = {"format": DIGEST_FORMAT, "python": python_minor,
            "requirements_sha256": requirements_sha256}
    return hashlib.sha256(canonical(body)).hexdigest()


def environment_digest(python_minor: str, requirements_bytes: bytes) -> str:
    """One environment per Python line and requirements text: the same pair, on any machine,
    names the same environment (what it resolved to is recorded in its freeze)."""
    return requirements_digest(python_minor, hashlib.sha256(requirements_bytes).hexdigest())


def cache_root() -> Path:
    """`$SEALBENCH_CACHE`, else `$XDG_CACHE_HOME/sealbench`, else `~/.cache/sealbench`."""
    named = os.environ.get("SEALBENCH_CACHE")
    if named:
        return Path(named).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache").absolute() / "sealbench"


def cache_summary(root: Path | None = None) -> str:
    """One line for `sealbench doctor`: where environments are cached and how many there are."""
    root = root or cache_root()
    envs = root / "envs"
    count = sum(1 for p in envs.iterdir() if p.is_symlink()) if envs.is_dir() else 0
    return f"{envs} ({count} environment{'s' if count != 1 else ''})"


# --------------------------------------------------------------------------- interpreters


@dataclass(frozen=True)
class Interpreter:
    """A base Python that venvs are made from."""

    executable: Path
    version: tuple[int, int, int]
    base_prefix: Path

    @property
    def minor(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def full(self) -> str:
        return ".".join(map(str, self.version))


def _running_interpreter() -> Interpreter:
    major, minor, micro = sys.version_info[:3]
    # the base a venv python stands on, so the record names what the new venv will use
    executable = getattr(sys, "_base_executable", None) or sys.executable
    return Interpreter(Path(executable), (major, minor, micro), Path(sys.base_prefix))


def _query(executable: str) -> Interpreter:
    """Ask an interpreter what it is; Refused, naming the field, when it does not run."""
    try:
        done = subprocess.run([executable, "-I", "-c", _QUERY], capture_output=True, text=True,
                              timeout=QUERY_TIMEOUT_SEC, check=False, stdin=subprocess.DEVNULL,
                              env=_clean_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"{FIELD_PYTHON}: {executable} does not run ({exc})") from None
    try:
        facts = json.loads(done.stdout)
        major, minor, micro = (int(v) for v in facts["version"])
        return Interpreter(Path(facts["executable"]), (major, minor, micro),
                           Path(facts["base_prefix"]))
    except (ValueError, KeyError, TypeError):
        # the first line: a launcher's (pyenv's) own complaint comes first, advice after
        said = next((line.strip() for line in done.stderr.splitlines() if line.strip()),
                    f"exit status {done.returncode}")
        raise Refused(f"{FIELD_PYTHON}: {executable} does not run: {said}") from None


def find_interpreter(python: str | None) -> Interpreter:
    """`python: "3.N"`: sealbench's own interpreter when it is 3.N, else `python3.N` on PATH,
    else refused; omitted: sealbench's own interpreter."""
    running = _running_interpreter()
    if python is None or python == running.minor:
        return running
    found = shutil.which(f"python{python}")
    if found is None:
        raise Refused(f"{FIELD_PYTHON}: Python {python} is wanted, but sealbench runs under "
                      f"{running.minor} and there is no python{python} on PATH")
    interpreter = _query(found)
    if interpreter.minor != python:
        raise Refused(f"{FIELD_PYTHON}: Python {python} is wanted, but python{python} on PATH "
                      f"({found}) is Python {interpreter.full}")
    return interpreter


# --------------------------------------------------------------------------- built environments


class _Marker(BaseModel):
    """`sealbench-environment.json`, the last file a build writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["sealbench-environment/v1"]
    record: EnvironmentRecord
    interpreter: str
    base_prefix: str
    distributions: list[str]  # name==version of each installed distribution, sorted


@dataclass(frozen=True)
class BuiltEnvironment:
    """A complete environment in the cache: what a sandbox needs to use it."""

    path: Path  # the venv's real directory (its scripts name it in their `#!` line)
    record: EnvironmentRecord
    base_prefix: Path  # the base interpreter's installation, which the venv's python needs

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def freeze(self) -> str:
        """`pip freeze --all` of the environment, as recorded when it was built."""
        return (self.path / FREEZE).read_text(encoding="utf-8")

    @property
    def mounts(self) -> tuple[Path, ...]:
        """Paths to bind read-only into a sandbox: the venv, and the base installation unless
        the sandbox has it anyway (under /usr) or binding it would bring back a private dir."""
        if any(self.base_prefix.is_relative_to(d) for d in SYSTEM_DIRS) or any(
                d.is_relative_to(self.base_prefix) for d in PRIVATE_DIRS):
            return (self.path,)
        return (self.path, self.base_prefix)


def sandbox_view(built: BuiltEnvironment | None, env: dict[str, str],
                 runtime: tuple[Path, ...]) -> tuple[dict[str, str], tuple[Path, ...]]:
    """The environment variables and read-only binds of a sandboxed command that runs in the
    sealed environment: its `bin` first on PATH, `VIRTUAL_ENV` set. Solver and verifier both
    call this, so they see the same environment."""
    if built is None:
        return env, runtime
    view = {k: v for k, v in env.items() if k not in ("PYTHONHOME", "PYTHONPATH")}
    view["VIRTUAL_ENV"] = str(built.path)
    view["PATH"] = os.pathsep.join([str(built.bin), env.get("PATH", os.defpath)])
    return view, (*runtime, *(p for p in built.mounts if p not in runtime))


_IMPORT_NAMES = ("import json, os, re, site, sys\n"
                 "names = set(sys.stdlib_module_names)\n"
                 "for d in site.getsitepackages():\n"
                 "    try: entries = os.listdir(d)\n"
                 "    except OSError: continue\n"
                 "    for e in entries:\n"
                 "        m = re.match(r'^([A-Za-z_][A-Za-z0-9_]*)(\\..*)?$', e)\n"
                 "        if m and not e.endswith(('.dist-info', '.egg-info', '.pth')) "
                 "and e != '__pycache__':\n"
                 "            names.add(m.group(1))\n"
                 "print(json.dumps(sorted(names)))")


def import_names(built: BuiltEnvironment | None) -> list[str]:
    """The top-level names the verifier's interpreter can import without the workspace: its
    standard library and what its site directories hold (the sealed environment's, or the
    host's `python3` without one). Sealing records them in the lock: a diff adding one of them
    where the tests import from is a violation (docs/protocol.md#what-the-verifier-trusts).
    Empty when the interpreter cannot be asked (the built-in floor still applies)."""
    python = str(built.bin / "python") if built is not None else shutil.which("python3")
    if python is None:
        return []
    try:
        done = subprocess.run([python, "-I", "-c", _IMPORT_NAMES], capture_output=True,
                              text=True, timeout=QUERY_TIMEOUT_SEC, check=False,
                              stdin=subprocess.DEVNULL, env=_clean_env())
        names = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    return sorted(n for n in names if isinstance(n, str) and n.isidentifier())


def build(spec: EnvironmentSpec, requirements_bytes: bytes, *, cache_dir: Path,
          find_links: Path | None = None) -> BuiltEnvironment:
    """The environment for spec and these (verified) requirements bytes: the cached one when
    it is complete and unchanged, else built now. The protocol's file is never read here."""
    links = _checked_links(find_links)  # a wrong directory is wrong even when nothing is built
    interpreter = find_interpreter(spec.python)
    record = EnvironmentRecord(
        python=interpreter.minor, python_full=interpreter.full,
        requirements_sha256=hashlib.sha256(requirements_bytes).hexdigest(),
        digest=environment_digest(interpreter.minor, requirements_bytes))
    envs = cache_dir / "envs"
    try:
        envs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"SEALBENCH_CACHE {cache_dir}: cannot be created ({exc.strerror or exc})"
                       ) from None
    link = envs / record.digest
    cached = _published(link, record.digest)
    if cached is not None:
        return cached
    _sweep(envs)
    work = envs / f"{record.digest}.{os.getpid()}-{secrets.token_hex(4)}"
    try:
        _make(work, interpreter, record, requirements_bytes, links)
        winner = _publish(work, link, record.digest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if winner is not None:
        shutil.rmtree(work, ignore_errors=True)
        return winner
    return _load(work, record.digest, link)


def _publish(work: Path, link: Path, digest: str) -> BuiltEnvironment | None:
    """Create the link to a complete build: None when this build is published, else the
    environment a concurrent build published first (this one is then to be removed)."""
    for _ in range(3):
        try:
            os.symlink(work.name, link)  # atomic: exactly one build creates the link
            return None
        except FileExistsError:
            winner = _published(link, digest)  # drops a dangling link: then try again
            if winner is not None:
                return winner
    raise Refused(f"cached environment {link}: could not be published (it keeps changing "
                  "under sealbench); try again")


def _checked_links(find_links: Path | None) -> Path | None:
    if find_links is None:
        return None
    if not find_links.is_dir():
        raise BadInput(f"--find-links {find_links}: not a directory")
    return find_links.resolve()


def _published(link: Path, digest: str) -> BuiltEnvironment | None:
    """The environment the link names, checked; None when there is none (a link left dangling
    by a removed directory is dropped, so a new build can publish)."""
    if not link.is_symlink():
        return None
    target = link.parent / os.readlink(link)
    if not target.is_dir():
        with contextlib.suppress(FileNotFoundError):
            if not link.resolve().is_dir():
                link.unlink()
        return None
    return _load(target, digest, link)


def _load(path: Path, digest: str, link: Path) -> BuiltEnvironment:
    """A published environment, refused when its marker is unreadable or what is installed in
    it is no longer what its build installed (someone ran pip in the cache)."""

    def refuse(why: str) -> Refused:
        return Refused(f"cached environment {link} ({path}) {why}; delete it (rm -rf {link} "
                       f"{path}) and run again to rebuild it")

    try:
        marker = _Marker.model_validate_json((path / MARKER).read_bytes())
    except (OSError, ValidationError):
        raise refuse("has no readable completion marker") from None
    if marker.record.digest != digest:
        raise refuse(f"was built for {marker.record.digest}")
    now = _distributions(path)
    if now is None:
        raise refuse("no longer runs (its base interpreter "
                     f"{marker.interpreter} may have been removed)")
    if now != marker.distributions:
        change = next((line for line in difflib.unified_diff(marker.distributions, now, n=0,
                                                              lineterm="")
                       if line[:1] in "+-" and not line.startswith(("+++", "---"))), "")
        raise refuse(f"differs from the one built (installed distributions changed: {change})")
    return BuiltEnvironment(path.resolve(), marker.record, Path(marker.base_prefix))


def _make(work: Path, interpreter: Interpreter, record: EnvironmentRecord,
          requirements_bytes: bytes, find_links: Path | None) -> None:
    """Create the venv, install the requirements, record what was installed, mark it done."""
    _run([str(interpreter.executable), "-m", "venv", "--without-pip", str(work)],
         "creating the virtual environment failed")
    python = work / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="sealbench-requirements-") as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_bytes(requirements_bytes)
        offline = ["--no-index", "--find-links", str(find_links)] if find_links else []
        # cwd is the scratch dir: a relative path in the requirements names nothing sealed
        _run([*_pip(python), "install", "--no-input", "--no-warn-script-location",
              "--progress-bar", "off", *offline, "-r", str(requirements)],
             "pip install failed", cwd=Path(scratch))
        freeze = _run([*_pip(python), "freeze", "--all"], "pip freeze failed",
                      cwd=Path(scratch))
    (work / FREEZE).write_text(freeze, encoding="utf-8")
    distributions = _distributions(work)
    if distributions is None:
        raise BadInput(f"{FIELD_REQUIREMENTS}: the new environment's python does not run")
    marker = _Marker(format=DIGEST_FORMAT, record=record, interpreter=str(interpreter.executable),
                     base_prefix=str(interpreter.base_prefix), distributions=distributions)
    tmp = work / f".{MARKER}.tmp"
    tmp.write_text(marker.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(work / MARKER)


def _pip(python: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    """Run a build step; its failure is one line naming the requirements field and the
    tool's last error line."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd,
                              stdin=subprocess.DEVNULL, env=_clean_env())
    except OSError as exc:
        raise BadInput(f"{FIELD_REQUIREMENTS}: {what}: {exc}") from None
    if done.returncode != 0:
        said = _last_error(done.stderr) or _last_line(done.stdout) or \
            f"exit status {done.returncode}"
        raise BadInput(f"{FIELD_REQUIREMENTS}: {what}: {said}")
    return done.stdout


def _distributions(venv: Path) -> list[str] | None:
    """name==version of every distribution installed in the venv, asked of its own python
    (no pip involved, so a newer pip cannot make an unchanged environment look changed)."""
    try:
        done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", _DISTRIBUTIONS],
                              capture_output=True, text=True, timeout=QUERY_TIMEOUT_SEC,
                              check=False, stdin=subprocess.DEVNULL, env=_clean_env())
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return [str(item) for item in found] if isinstance(found, list) else None


def _clean_env() -> dict[str, str]:
    """This process's environment without what would point Python elsewhere (pip's own
    configuration, PIP_*, stays: it is how packages are fetched, not what is installed)."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV", "PIP_TARGET",
            "PIP_PREFIX", "PIP_ROOT", "PIP_USER", "PIP_PYTHON")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _last_error(text: str) -> str:
    errors = [line.strip() for line in text.splitlines() if line.startswith("ERROR:")]
    return errors[-1] if errors else _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _sweep(envs: Path) -> None:
    """Remove builds whose builder died (killed half-way, or before publishing): no link
    names them and their pid is gone. Each is claimed by a rename first, so of two sweeps
    only one removes it."""
    linked = {os.readlink(p) for p in envs.iterdir() if p.is_symlink()}
    for path in envs.iterdir():
        found = BUILD_NAME.match(path.name)
        if found is None or path.is_symlink() or path.name in linked \
                or Path(f"/proc/{found['pid']}").exists():
            continue
        claim = envs / f"{found['digest']}.{os.getpid()}-gone{secrets.token_hex(4)}"
        try:
            os.rename(path, claim)
        except OSError:
            continue
        shutil.rmtree(claim, ignore_errors=True)
