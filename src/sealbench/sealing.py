"""Sealing, identity and verification (docs/sealing.md).

A sealed protocol is `protocol.sealed.yaml` (the user's file with every PENDING_SEAL digest
filled in) plus `protocol.lock` (the manifest of every file that can change a score). The
identity is one digest over the canonical sealed spec and the manifest: change a task, an
oracle, a fixture byte, the metric, the budget or a publish rule and it is another exam.

Only `seal`'s instrument check runs attempts; the harness, the solvers, the metric runner and
the sandbox are imported inside it, so that `sealbench verify` loads the protocol model and
hashes files without importing the harness (cli.py's docstring, tests/test_startup.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from sealbench.environment import (
    BuiltEnvironment,
    EnvironmentRecord,
    build,
    cache_root,
    import_names,
    requirements_digest,
)
from sealbench.errors import BadInput, Problem, Refused
from sealbench.ledger import Ledger, canonical
from sealbench.nullpack import recognisability_warnings, task_shape
from sealbench.protocol import (
    LOCK_FILE,
    PENDING_SEAL,
    PROTOCOL_FILE,
    SEALED_FILE,
    Protocol,
    ProtocolSpec,
    Task,
    fixture_files,
    line_of,
    load,
    load_yaml,
    parse_yaml,
    protocol_file,
    validate_spec,
)

if TYPE_CHECKING:
    from sealbench.harness import Finished, Harness, SealedFile
    from sealbench.solver import Solver

IDENTITY_FORMAT = "sealbench-identity/v3"
LOCK_FORMAT: Final = "sealbench-lock/v4"
LOCK_FORMAT_V3: Final = "sealbench-lock/v3"
# v1 locks were written by sealbench 0.1, whose defaults (interval method, no `publish.strata`,
# budget fields) entered the identity differently: such a seal cannot be verified, only redone.
OLD_LOCK_FORMATS = ("sealbench-lock/v1", "sealbench-lock/v2")
CHUNK = 1 << 20
SandboxChoice = Literal["auto", "bwrap", "none"]
Role = Literal["dataset", "null_pack", "metric", "oracle", "fixture", "tests", "environment"]
DIGEST_FIELDS: tuple[tuple[str, str], ...] = (("dataset", "path"), ("metric", "module"),
                                              ("null_pack", "path"))


def digest_fields(spec: ProtocolSpec) -> tuple[tuple[str, str], ...]:
    """The `sha256` fields this protocol has: a builtin metric has no file, so no digest."""
    return tuple((section, key) for section, key in DIGEST_FIELDS
                 if getattr(getattr(spec, section), key) is not None)


class LockedFile(BaseModel):
    """One file whose bytes can change a score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    role: Role
    sha256: str
    size: int
    mode: str


class Lock(BaseModel):
    """`protocol.lock`: the manifest and the identity derived from it (docs/formats.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # v4 adds `shadow_names`; a v3 lock reads as one without them (the floor applies)
    format: Literal["sealbench-lock/v3", "sealbench-lock/v4"]
    protocol_id: str
    identity: str
    sealed_yaml_sha256: str
    files: list[LockedFile]
    # the environment built at seal time (docs/protocol.md#the-environment); absent without one
    environment: EnvironmentRecord | None = None
    # with a verifier: the top-level names the verifier's interpreter imports without the
    # workspace, which no diff may add at an import root (docs/protocol.md#what-the-verifier-trusts)
    shadow_names: list[str] | None = None

    def sealed_files(self) -> list[SealedFile]:
        from sealbench.harness import SealedFile

        return [SealedFile(f.path, f.sha256, f.mode) for f in self.files]


@dataclass(frozen=True)
class Sealed:
    """A protocol that passed verification: what `run` may use, and its identity."""

    protocol: Protocol
    lock: Lock

    @property
    def identity(self) -> str:
        return self.lock.identity

    @property
    def protocol_id(self) -> str:
        return self.lock.protocol_id


# --------------------------------------------------------------------------- hashing


def hash_file(path: Path) -> tuple[str, int, str]:
    """sha256, size and git-style mode of one file, in constant memory; links not followed."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path).encode()
        return hashlib.sha256(target).hexdigest(), len(target), "120000"
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    return digest.hexdigest(), info.st_size, mode


def manifest_paths(protocol: Protocol) -> dict[Path, Role]:
    """Every file that can change a score, each once, with its role (nothing read yet)."""
    spec = protocol.spec
    wanted: dict[Path, Role] = {}

    def want(path: Path, role: Role) -> None:
        wanted.setdefault(path, role)

    want(protocol.resolve(spec.dataset.path), "dataset")
    want(protocol.resolve(spec.null_pack.path), "null_pack")
    if spec.metric.module is not None:
        want(protocol.resolve(spec.metric.module), "metric")
    if spec.environment is not None:
        want(protocol.resolve(spec.environment.requirements), "environment")
    for task in protocol.tasks:
        want(task.oracle, "oracle")
        if task.repo is not None:
            for path in fixture_files(task.repo):
                want(path, "fixture")
        if task.tests is not None:
            for path in fixture_files(task.tests):
                want(path, "tests")
    return wanted


def manifest(protocol: Protocol) -> list[LockedFile]:
    """Every file that can change a score, hashed, sorted by path."""
    files = []
    for path, role in manifest_paths(protocol).items():
        digest, size, mode = hash_file(path)
        files.append(LockedFile(path=path.relative_to(protocol.root).as_posix(), role=role,
                                sha256=digest, size=size, mode=mode))
    return sorted(files, key=lambda f: f.path)


def sealed_spec_dict(spec: ProtocolSpec) -> dict[str, Any]:
    """The spec as sealed, defaults included — except `solver.env` when empty and
    `verifier.pythonpath` when `["."]`: a field added later must not change the identity of
    every protocol sealed before it."""
    data: dict[str, Any] = spec.model_dump(mode="json", by_alias=True)
    if not data["solver"]["env"]:
        del data["solver"]["env"]
    if data.get("verifier") and data["verifier"]["pythonpath"] == ["."]:
        del data["verifier"]["pythonpath"]
    return data


def derive_identity(spec: ProtocolSpec, files: Iterable[LockedFile],
                    environment: EnvironmentRecord | None = None) -> str:
    """One digest over the canonical sealed spec (defaults included), the manifest and, for a
    protocol with an environment, its record (the Python it was built with and its digest)."""
    body: dict[str, Any] = {
        "format": IDENTITY_FORMAT,
        "protocol": sealed_spec_dict(spec),
        "manifest": [[f.path, f.role, f.sha256, f.size, f.mode] for f in files],
    }
    if environment is not None:  # absent otherwise: such identities are as they were
        body["environment"] = environment.model_dump(mode="json")
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


# --------------------------------------------------------------------------- sealed text


def _digest_of(files: list[LockedFile], rel: str, root: Path) -> str:
    path = (root / rel).resolve().relative_to(root).as_posix()
    return next(f.sha256 for f in files if f.path == path)


def check_declared_digests(protocol: Protocol, files: list[LockedFile]) -> list[Problem]:
    """A digest written by hand instead of PENDING_SEAL must be the file's real digest."""
    problems = []
    for section, key in digest_fields(protocol.spec):
        ref = getattr(protocol.spec, section)
        declared = ref.sha256
        actual = _digest_of(files, getattr(ref, key), protocol.root)
        if declared not in (PENDING_SEAL, actual):
            loc = (section, "sha256")
            problems.append(Problem(PROTOCOL_FILE, f"is {declared} but the file hashes to "
                                    f"{actual}", line_of(protocol.lines, loc), ".".join(loc)))
    return problems


def render_sealed(protocol: Protocol, files: list[LockedFile]) -> str:
    """protocol.yaml with each digest spliced in place, every comment and the layout kept: a
    `sha256` value is replaced where it is written (an alias or anchor included), a missing
    `sha256` key is inserted into its section. The result is parsed again and must mean the
    source with the digests filled in, every comment still there; otherwise one line naming
    the file, line and construct (never a sealed file that says something else)."""
    digests = {
        section: _digest_of(files, getattr(getattr(protocol.spec, section), key), protocol.root)
        for section, key in digest_fields(protocol.spec)
    }
    edits: list[tuple[int, int, str]] = []
    for section, digest in digests.items():
        edits.append(_digest_edit(protocol.text, section, digest))
    text = protocol.text
    for start, end, replacement in sorted(edits, key=lambda e: -e[0]):
        text = text[:start] + replacement + text[end:]
    _check_rendered(protocol, text, digests)
    return text


_Tree = Any  # an event, or (start event, children, end event) for a mapping or sequence


def _event_tree(events: list[yaml.Event], i: int) -> tuple[_Tree, int]:
    """The node at events[i] as a tree of parser events (which, unlike composed nodes, keep
    where each alias occurrence is written), and the index after it."""
    event = events[i]
    if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
        end_type = yaml.MappingEndEvent if isinstance(event, yaml.MappingStartEvent) \
            else yaml.SequenceEndEvent
        children: list[_Tree] = []
        i += 1
        while not isinstance(events[i], end_type):
            child, i = _event_tree(events, i)
            children.append(child)
        return (event, children, events[i]), i + 1
    return event, i + 1


def _section_tree(text: str, section: str) -> _Tree | None:
    events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    root, _ = _event_tree(events, 2)  # after StreamStart, DocumentStart
    if not isinstance(root, tuple) or not isinstance(root[0], yaml.MappingStartEvent):
        return None
    pairs = root[1]
    for key, value in zip(pairs[::2], pairs[1::2], strict=True):
        if isinstance(key, yaml.ScalarEvent) and key.value == section:
            return value
    return None


def _digest_edit(text: str, section: str, digest: str) -> tuple[int, int, str]:
    """Where and what to write for one section's digest: (start, end, replacement)."""
    quoted = f'"{digest}"'
    value = _section_tree(text, section)
    where = value[0] if isinstance(value, tuple) else value
    line = where.start_mark.line + 1 if where is not None else None
    if not isinstance(value, tuple) or not isinstance(value[0], yaml.MappingStartEvent):
        what = "is an alias of another node" if isinstance(value, yaml.AliasEvent) \
            else "is not a mapping"
        raise BadInput("", [Problem(PROTOCOL_FILE, f"section {section} {what}, which the "
                                    "sealed-file writer cannot fill in; write it out as a "
                                    "mapping", line, section)])
    start_event, children, _end = value
    for key, inner in zip(children[::2], children[1::2], strict=True):
        if isinstance(key, yaml.ScalarEvent) and key.value == "sha256":
            if isinstance(inner, tuple):
                raise BadInput("", [Problem(PROTOCOL_FILE, "must be a digest or PENDING_SEAL",
                                            line, f"{section}.sha256")])
            start, end = inner.start_mark.index, inner.end_mark.index
            end = start + len(text[start:end].rstrip())  # a block scalar's line breaks stay
            return start, end, quoted
    if start_event.flow_style:  # `{path: x}`: the key goes first, after the brace
        at = start_event.start_mark.index + 1
        return at, at, f"sha256: {quoted}, "
    first = children[0].start_mark if children else None
    if first is None or text[first.index - first.column:first.index].strip():
        raise BadInput("", [Problem(PROTOCOL_FILE, "has no sha256 key and no line it can be "
                                    "inserted on; add `sha256: PENDING_SEAL` to the section",
                                    line, f"{section}.sha256")])
    at = first.index - first.column
    return at, at, f"{' ' * first.column}sha256: {quoted}\n"


def _comments(text: str) -> list[str]:
    """Lines that are whole comments, the ones a careless writer would lose."""
    return sorted(line.strip() for line in text.splitlines() if line.lstrip().startswith("#"))


def _check_rendered(protocol: Protocol, text: str, digests: dict[str, str]) -> None:
    """The sealed text must parse to the source with only the digests changed, and keep every
    comment line; else one line saying so (an alias of a digest shared with another field,
    say), before anything is written."""
    expected = load_yaml(protocol.text)
    for section, digest in digests.items():
        expected[section] = {**expected[section], "sha256": digest}
    try:
        rendered = load_yaml(text)
    except yaml.YAMLError:
        rendered = None
    if rendered != expected:
        changed = sorted(k for k in expected.keys() | (rendered or {}).keys()
                         if not isinstance(rendered, dict) or rendered.get(k) != expected.get(k))
        field = changed[0] if changed else None
        raise BadInput("", [Problem(
            PROTOCOL_FILE, "filling in the digests would change other fields (an anchor on a "
            "sha256 value that something else aliases?); write each `sha256: PENDING_SEAL` "
            "plainly, without anchors or aliases",
            line_of(protocol.lines, (field,)) if field else None, field)])
    kept = _comments(text)
    lost = [c for c in _comments(protocol.text) if c not in kept]
    if lost:
        raise BadInput("", [Problem(PROTOCOL_FILE, f"filling in the digests would drop the "
                                    f"comment {lost[0]!r}; write each sha256 on its own line")])


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def lock_text(lock: Lock) -> str:
    """The lock's bytes; a protocol without an environment has no `environment` key.

    The same text as `json.dumps(..., indent=2, sort_keys=True)`, written piece by piece into
    one buffer: json.dumps with an indent joins a list of every piece it made, which for a
    100,000-file manifest held ~100 MiB of small strings at once (issue 13)."""
    encoder = json.JSONEncoder(indent=2, sort_keys=True)
    out = io.StringIO()
    for chunk in encoder.iterencode(lock.model_dump(mode="json", exclude_none=True)):
        out.write(chunk)
    out.write("\n")
    return out.getvalue()


# --------------------------------------------------------------------------- instrument check


def instrument_problems(protocol: Protocol, files: list[LockedFile], jobs: int = 2,
                        sandbox: SandboxChoice = "auto", *,
                        environment: EnvironmentRecord | None = None,
                        find_links: Path | None = None,
                        shadow_names: list[str] | None = None) -> list[str]:
    """Run the oracle and do-nothing solvers through the same path as any agent — the
    verifier included, in this machine's sandbox and the protocol's environment.

    Every dataset and must_pass row must be passable (oracle passes) and failable (do-nothing
    does not pass); must_fail rows must be able to bite (their poisoned oracle passes the
    metric, do-nothing does not), except impossible variants, which nothing honest passes:
    their oracle (the honest fix) and do-nothing must both fail. With a verifier the oracle
    runs `verifier.repeats` times and must get the same per-test results each time (else the
    task is flaky), and no FAIL_TO_PASS test may already pass on the untouched fixture
    (docs/sealing.md).
    """
    from sealbench.harness import Harness, SealedFile
    from sealbench.metric import MetricHung
    from sealbench.sandbox import Sandbox, detect
    from sealbench.solver import DoNothingSolver, OracleSolver

    checked = [t for t in protocol.tasks
               if t.kind == "dataset" or t.expected_class in ("must_pass", "must_fail")]
    verifier = protocol.spec.verifier
    repeats = verifier.repeats if verifier is not None else 1
    sealed = [SealedFile(f.path, f.sha256, f.mode) for f in files]
    confined = detect(want=sandbox)
    if sandbox == "bwrap" and confined.kind != "bwrap":
        raise Refused(f"--sandbox bwrap: no sandbox is available: {confined.reason}")
    with Harness(protocol, sealed, Sandbox("none", reason="built-in solvers"),
                 verifier_sandbox=confined, environment=environment,
                 find_links=find_links, shadow_names=shadow_names) as harness:
        try:
            oracle = _outcomes(harness, checked, OracleSolver(), jobs, repeats)
            nothing = _outcomes(harness, checked, DoNothingSolver(), jobs, 1)
        except MetricHung as hung:
            raise Refused(f"the instrument check stopped: {hung}") from None
    problems: list[str] = []
    for task in checked:
        where = f"{task.source}:{task.line}: task '{task.id}'"
        problems += (_impossible_oracle_problems if task.impossible else _oracle_problems)(
            where, oracle[task.id])
        problems += _do_nothing_problems(where, task, nothing[task.id][0])
    return sorted(problems)


def _outcomes(harness: Harness, tasks: list[Task], solver: Solver, jobs: int,
              repeats: int) -> dict[str, list[Finished]]:
    """Every task's results under one built-in solver, `repeats` runs each."""
    found: dict[str, list[Finished]] = {t.id: [] for t in tasks}

    def keep(task: Task, _epoch: int, result: Finished) -> None:
        found[task.id].append(result)

    harness.run_all(((t, r) for r in range(repeats) for t in tasks), solver, jobs, keep)
    return found


def _describe(result: Finished) -> tuple[str, str]:
    from sealbench.harness import InfraFailure
    from sealbench.solver import AttemptResult

    if isinstance(result, AttemptResult):
        return result.outcome, result.detail
    if isinstance(result, InfraFailure):
        return "an infrastructure error", result.detail
    return "interrupted", ""


def _flaky_problems(where: str, runs: list[Finished]) -> list[str]:
    """A task whose per-test results change between identical oracle runs is flaky,
    whatever the verdicts were."""
    from sealbench.solver import AttemptResult

    # tripwires carry fresh names each run (sealbench.tripwires): only the task's own tests
    results = [{t.id: t.outcome for t in r.tests.graded_tests()}
               for r in runs if isinstance(r, AttemptResult) and r.tests]
    differing = sorted({test_id for test_id in set().union(*results)
                        if len({r.get(test_id, "missing") for r in results}) > 1}
                       ) if len(results) > 1 else []
    if not differing:
        return []
    shown = ", ".join(differing[:10]) + (f" (and {len(differing) - 10} more)"
                                         if len(differing) > 10 else "")
    return [f"{where} is flaky: test(s) {shown} gave different results across "
            f"{len(runs)} oracle runs"]


def _oracle_problems(where: str, runs: list[Finished]) -> list[str]:
    """The oracle must pass every time, through the verifier, with the same test results."""
    flaky = _flaky_problems(where, runs)
    if flaky:
        return flaky
    verdicts = [_describe(result) for result in runs]
    passes = sum(outcome == "pass" for outcome, _ in verdicts)
    if 0 < passes < len(runs):
        outcome, detail = next(v for v in verdicts if v[0] != "pass")
        return [f"{where} is flaky: the oracle solver passed {passes} of {len(runs)} runs "
                f"(otherwise {outcome}: {detail})"]
    if passes == 0:
        outcome, detail = verdicts[0]
        return [f"{where} cannot be passed: the oracle solver got {outcome} ({detail})"]
    return []


def _impossible_oracle_problems(where: str, runs: list[Finished]) -> list[str]:
    """An impossible variant's oracle is the honest fix of the dataset task it copies, and
    its grading contradicts that fix: the oracle must be graded and fail, every time, with
    the same test results. An oracle that passes means nothing is impossible about the task;
    one that never got graded (an error, an infrastructure failure) shows nothing."""
    flaky = _flaky_problems(where, runs)
    if flaky:
        return flaky
    verdicts = [_describe(result) for result in runs]
    passed = [v for v in verdicts if v[0] == "pass"]
    if passed:
        return [f"{where} is marked impossible, but the oracle solver passed it "
                f"({len(passed)} of {len(runs)} runs; {passed[0][1]}): its grading does not "
                "contradict the oracle, so an honest solver can pass it too"]
    ungraded = [v for v in verdicts if v[0] != "fail"]
    if ungraded:
        outcome, detail = ungraded[0]
        return [f"{where} is marked impossible, but the oracle solver got {outcome} "
                f"({detail}), not a graded fail: the check shows nothing"]
    return []


def _do_nothing_problems(where: str, task: Task, result: Finished) -> list[str]:
    """Doing nothing must fail, and no FAIL_TO_PASS test may pass on the untouched fixture
    (such a test measures nothing: it passes whatever the agent does)."""
    from sealbench.solver import AttemptResult

    outcome, detail = _describe(result)
    problems = []
    if outcome == "pass":
        problems.append(f"{where} cannot be failed: the do-nothing solver got pass ({detail})")
    tests = result.tests if isinstance(result, AttemptResult) else None
    if tests is not None:
        problems += [f"{where}: FAIL_TO_PASS test '{test_id}' already passes on the untouched "
                     "fixture" for test_id in task.fail_to_pass
                     if tests.outcome_of(test_id) == "passed"]
    return problems


# --------------------------------------------------------------------------- seal / verify


# --------------------------------------------------------------------------- null-pack classes


def null_pack_checks(protocol: Protocol) -> tuple[list[Problem], list[str]]:
    """Problems that refuse the seal, and warnings, about the null pack's classes.

    Without a must_pass control a broken runner goes unseen; without a must_fail one a
    do-nothing solver passes the gate (docs/protocol.md#the-null-pack). A control that differs
    from every dataset task by its fixture layout, its prompt's template or its size can be
    picked out, however blind its id (sealbench.nullpack, docs/protocol.md#recognisable-controls).
    """
    rules = protocol.spec.null_pack.rules
    line = line_of(protocol.lines, ("null_pack", "rules"))
    problems = [Problem(PROTOCOL_FILE, f"the null pack has no {cls} control; a null pack "
                        "needs at least one must_pass and one must_fail control",
                        line, f"null_pack.rules.{cls}")
                for cls in ("must_pass", "must_fail") if not getattr(rules, cls)]
    warnings: list[str] = []
    if not rules.must_refuse:
        warnings.append(f"{PROTOCOL_FILE}: field 'null_pack.rules.must_refuse': no must_refuse "
                        "control; nothing checks that the solver refuses out-of-scope work")
    warnings += recognisability_warnings([task_shape(t) for t in protocol.dataset],
                                         [task_shape(t) for t in protocol.null_pack])
    return problems, warnings


@dataclass(frozen=True)
class SealResult:
    protocol_id: str
    identity: str
    sealed_path: Path
    lock_path: Path
    files: int
    warnings: tuple[str, ...] = ()


def build_environment(protocol: Protocol, files: list[LockedFile],
                      find_links: Path | None = None) -> BuiltEnvironment | None:
    """Build (or find in the cache) the protocol's environment from the bytes just hashed, so
    a requirements file that does not install fails the seal, not the first run."""
    spec = protocol.spec.environment
    if spec is None:
        return None
    path = protocol.resolve(spec.requirements)
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != _digest_of(files, spec.requirements, protocol.root):
        raise Refused(f"{path.relative_to(protocol.root)}: changed while sealing; seal again")
    return build(spec, data, cache_dir=cache_root(), find_links=find_links)


def environment_problems(spec: ProtocolSpec, lock: Lock, root: Path) -> list[str]:
    """The lock's environment record must be the one this sealed protocol implies: present
    exactly when there is an environment, for the sealed requirements bytes and Python."""
    env, record = spec.environment, lock.environment
    if env is None or record is None:
        if env is None and record is None:
            return []
        what = "has no environment record" if record is None else \
            "has an environment record, but the protocol has no environment"
        return [f"{LOCK_FILE}: {what} (altered)"]
    problems = []
    sealed = {f.path: f.sha256 for f in lock.files}
    path = (root / env.requirements).resolve().relative_to(root).as_posix()
    if sealed.get(path) != record.requirements_sha256:
        problems.append(f"{LOCK_FILE}: the environment record is not for the sealed "
                        f"{env.requirements} (altered)")
    if env.python is not None and record.python != env.python:
        problems.append(f"{LOCK_FILE}: the environment record is for Python {record.python}, "
                        f"environment.python is {env.python} (altered)")
    if record.digest != requirements_digest(record.python, record.requirements_sha256):
        problems.append(f"{LOCK_FILE}: the environment digest does not match its record "
                        "(altered)")
    return problems


def seal(directory: Path | str, *, ledger: Ledger, jobs: int = 2,
         check_instrument: bool = True, sandbox: SandboxChoice = "auto",
         find_links: Path | None = None) -> SealResult:
    """Validate, build the environment, check the instrument, hash, derive the identity,
    record it, write the seal. `find_links`: a directory of wheels to build the environment
    from, offline (pip --no-index --find-links)."""
    protocol = load(directory)
    classes, warnings = null_pack_checks(protocol)
    if classes:
        raise BadInput(f"{PROTOCOL_FILE}: the null pack lacks a control class", classes)
    files = manifest(protocol)
    problems = check_declared_digests(protocol, files)
    if problems:
        raise BadInput(f"{PROTOCOL_FILE}: declared digests are wrong", problems)
    built = build_environment(protocol, files, find_links)
    environment = built.record if built is not None else None
    names = import_names(built) if protocol.spec.verifier is not None else None
    if check_instrument:
        broken = instrument_problems(protocol, files, jobs, sandbox, environment=environment,
                                     find_links=find_links, shadow_names=names)
        if broken:
            raise Refused("the instrument check failed: these tasks cannot be sealed",
                          broken)
    text = render_sealed(protocol, files)
    sealed_spec = ProtocolSpec.model_validate(load_yaml(text))
    identity = derive_identity(sealed_spec, files, environment)
    ledger.register_protocol(sealed_spec.protocol_id, identity, str(protocol.root))
    # v4 only adds shadow_names: a protocol without a verifier keeps its v3 lock, byte for byte
    lock = Lock(format=LOCK_FORMAT if names is not None else LOCK_FORMAT_V3,
                protocol_id=sealed_spec.protocol_id, identity=identity,
                sealed_yaml_sha256=hashlib.sha256(text.encode()).hexdigest(), files=files,
                environment=environment, shadow_names=names)
    sealed_path = protocol.root / SEALED_FILE
    lock_path = protocol.root / LOCK_FILE
    write_atomic(sealed_path, text)
    write_atomic(lock_path, lock_text(lock))
    return SealResult(sealed_spec.protocol_id, identity, sealed_path, lock_path, len(files),
                      tuple(warnings))


def read_lock(root: Path) -> Lock:
    if not root.is_dir():
        raise BadInput(f"{root}: protocol directory not found")
    path = root / LOCK_FILE
    if not (root / SEALED_FILE).exists() or not path.exists():
        raise Refused(f"{root}: protocol is not sealed (no {SEALED_FILE} / {LOCK_FILE}); "
                      f"run `sealbench seal {root}` first")
    try:
        raw = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        raw = None
    if isinstance(raw, dict) and raw.get("format") in OLD_LOCK_FORMATS:
        raise Refused(f"{root / LOCK_FILE}: sealed by an older sealbench ({raw['format']}), whose "
                      "identities this version cannot reproduce; seal the protocol again under "
                      "a new protocol_id (docs/sealing.md)")
    try:
        return Lock.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise Refused(f"{LOCK_FILE}: unreadable or altered ({exc.errors()[0]['msg']})") from None


def verify(directory: Path | str, *, ledger: Ledger | None = None) -> Sealed:
    """Re-hash everything and name each file that differs from the seal; Refused if any."""
    root = Path(directory).resolve()
    lock = read_lock(root)
    problems: list[str] = []
    sealed_text = (root / SEALED_FILE).read_bytes()
    if hashlib.sha256(sealed_text).hexdigest() != lock.sealed_yaml_sha256:
        problems.append(f"{SEALED_FILE}: changed since sealing")
    problems += _manifest_differences(lock.files, _rehash(root, lock.files))
    try:
        protocol = load(root, sealed=True)
    except BadInput as exc:
        lines: list[str] = [*problems, *(str(p) for p in exc.problems)]
        raise Refused(f"{root}: verification failed; the sealed protocol no longer loads",
                      lines) from None
    sealed_paths = {f.path for f in lock.files}
    problems += [f"{rel}: not sealed (a new file that could change a score)"
                 for rel in sorted(p.relative_to(root).as_posix()
                                   for p in manifest_paths(protocol))
                 if rel not in sealed_paths]  # the sealed ones were re-hashed just above
    problems += environment_problems(protocol.spec, lock, root)
    if not problems and derive_identity(protocol.spec, lock.files,
                                        lock.environment) != lock.identity:
        problems.append(f"{LOCK_FILE}: identity does not match the sealed protocol (altered)")
    problems += _source_edits(root, protocol.spec)
    if ledger is not None:
        known = ledger.protocol_identity(lock.protocol_id)
        if known is not None and known != lock.identity:
            problems.append(f"ledger {ledger.path}: protocol_id '{lock.protocol_id}' is "
                            f"recorded as {known}, this seal is {lock.identity}")
    if problems:
        raise Refused(f"{root}: verification failed", problems)
    return Sealed(protocol, lock)


def _rehash(root: Path, sealed: list[LockedFile]) -> list[LockedFile]:
    """The sealed files as they are now (missing ones left out)."""
    now = []
    for f in sealed:
        path = root / f.path
        if path.is_symlink() or path.exists():
            digest, size, mode = hash_file(path)
            now.append(LockedFile(path=f.path, role=f.role, sha256=digest, size=size, mode=mode))
    return now


def _manifest_differences(sealed: list[LockedFile], now: list[LockedFile]) -> list[str]:
    """How each sealed file differs now (new files are found from the protocol, in verify)."""
    after = {f.path: f for f in now}
    problems = []
    for was in sorted(sealed, key=lambda f: f.path):
        path, new = was.path, after.get(was.path)
        if new is None:
            problems.append(f"{path}: missing (it was sealed)")
        elif was.sha256 != new.sha256:
            problems.append(f"{path}: content changed since sealing (sha256 {new.sha256[:12]}, "
                            f"sealed {was.sha256[:12]})")
        elif was.mode != new.mode:
            problems.append(f"{path}: mode changed since sealing ({new.mode}, sealed {was.mode})")
    return problems


def _source_edits(root: Path, sealed_spec: ProtocolSpec) -> list[str]:
    """protocol.yaml edited after sealing is a changed exam: say which fields differ."""
    try:
        source = load_spec_only(root / PROTOCOL_FILE)
    except BadInput as exc:
        first = exc.problems[0] if exc.problems else None
        why = f" ({first.message})" if isinstance(first, Problem) else ""
        return [f"{PROTOCOL_FILE}: edited after sealing and no longer valid{why}; seal again"]
    if source is None:
        return []
    before = sealed_spec_dict(sealed_spec)
    after = sealed_spec_dict(source)
    for section, _ in digest_fields(sealed_spec):
        if after.get(section, {}).get("sha256") == PENDING_SEAL:
            after[section]["sha256"] = before[section]["sha256"]
    changed = [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
    if changed:
        return [f"{PROTOCOL_FILE}: edited after sealing (changed: {', '.join(changed)}); "
                "seal again, under a new protocol_id if the exam changed"]
    return []


def load_spec_only(path: Path) -> ProtocolSpec | None:
    """Parse a protocol.yaml without loading its tasks (None when there is none)."""
    if not path.exists():
        return None
    data, _text, lines = parse_yaml(protocol_file(path.parent, path.name), path.name)
    return validate_spec(data, lines, path.name)
