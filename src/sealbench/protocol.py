"""Load and validate a protocol directory (docs/protocol.md).

Everything a later stage relies on is checked here, once, and every problem is reported with
file, line and field: a user fixing a 50-row JSONL file should not have to run `seal` 50 times.
Paths are resolved here too, and nothing that leads outside the protocol directory survives.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from sealbench.errors import BadInput, Problem

SCHEMA = "agent-bench-protocol/v1"
PENDING_SEAL = "PENDING_SEAL"
PROTOCOL_FILE = "protocol.yaml"
SEALED_FILE = "protocol.sealed.yaml"
LOCK_FILE = "protocol.lock"
TASK_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTROL_CLASSES = ("must_pass", "must_fail", "must_refuse")
KNOWN_FORBIDDEN_FIELDS = ("single_percentage_only",)
ControlClass = Literal["must_pass", "must_fail", "must_refuse"]
# what the solver may reach (docs/isolation.md#network-policy)
NetworkPolicy = Literal["none", "model-api", "open"]
NETWORK_POLICIES: tuple[NetworkPolicy, ...] = ("none", "model-api", "open")
Kind = Literal["dataset", "null_pack"]
# every time limit a protocol sets (budget.timeout_sec, a task's timeout_sec, verifier.timeout_sec,
# metric.timeout_sec), and each of them times `run --timeout-scale`, is a finite number of
# seconds at most this: 24 h (docs/protocol.md#time-limits). `.inf` would never kill a sleeper.
MAX_TIME_LIMIT_SEC = 86400
TIME_LIMIT_RULE = f"a finite number of seconds, at most {MAX_TIME_LIMIT_SEC} (24 h)"


class _Strict(BaseModel):
    """Unknown keys are refused: a typo like `max_files_touchd` must not silently mean 'default'."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetRef(_Strict):
    path: str
    sha256: str = PENDING_SEAL


BUILTIN_METRICS = ("tests_v1",)
METRIC_INTERFACES = (1, 2)


class MetricRef(_Strict):
    """Either a sealed module (`module`, hashed) or a built-in metric (`builtin`), never both.

    `interface` 1 is the seed's `score(result_diff, oracle_path)`; 2 is `score(attempt)` with
    the diff, the test results and a read-only view of the workspace (docs/protocol.md).
    """

    module: str | None = None
    builtin: Literal["tests_v1"] | None = None
    sha256: str = PENDING_SEAL
    interface: Literal[1, 2] = 1
    timeout_sec: float = Field(default=60, gt=0, le=MAX_TIME_LIMIT_SEC, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_source(self) -> MetricRef:
        if (self.module is None) == (self.builtin is None):
            raise ValueError("give exactly one of metric.module and metric.builtin")
        if self.builtin is not None and self.sha256 != PENDING_SEAL:
            raise ValueError("a builtin metric has no sha256 (it is part of sealbench)")
        return self


# what runs inside the test runner before the tests: its plugins and conftests, and every file
# pytest reads its configuration (addopts, plugins) from
DEFAULT_PROTECTED = ("conftest.py", "pytest.py", "_pytest", "py.py", "pluggy", "pytest.ini",
                     ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "tox.ini",
                     "setup.cfg", "sitecustomize.py", "usercustomize.py", "*.pth")


class VerifierSpec(_Strict):
    """How hidden tests are run after the solver (docs/protocol.md#the-verifier).

    `command` is split like a shell line (no shell runs it); `{tests}` becomes the hidden test
    files' workspace paths, `{junit}` the path the JUnit XML report must be written to,
    `{workspace}` the workspace root.
    """

    command: str = Field(min_length=1)
    timeout_sec: float = Field(default=300, gt=0, le=MAX_TIME_LIMIT_SEC, allow_inf_nan=False)
    # oracle runs at seal time whose per-test results must agree, or the task is flaky
    repeats: int = Field(default=3, ge=1, le=20)
    max_output_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_memory_mb: int = Field(default=4096, ge=64)
    # paths an attempt's diff may not touch: what would run inside the test runner's own
    # process before or instead of the tests (docs/protocol.md#what-the-verifier-trusts)
    protected: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED))
    # workspace directories the code under test is imported from, appended to sys.path after
    # the runner's own modules (docs/protocol.md#what-the-verifier-trusts)
    pythonpath: list[str] = Field(default_factory=lambda: ["."], min_length=1)

    @field_validator("pythonpath")
    @classmethod
    def _inside_the_workspace(cls, value: list[str]) -> list[str]:
        for entry in value:
            parts = PurePosixPath(entry).parts
            if not entry or entry.startswith("/") or ".." in parts or "\\" in entry:
                raise ValueError(f"{entry!r} is not a directory inside the workspace "
                                 "(relative, no '..')")
        return value


class EnvironmentSpec(_Strict):
    """A virtual environment built per protocol identity, mounted read-only for solver and
    verifier (docs/protocol.md#the-environment). `python` is `3.N`; omitted, it is the
    interpreter sealing runs under, recorded in the lock and the identity."""

    python: str | None = Field(default=None, pattern=r"^3\.[0-9]+$")
    requirements: str = Field(min_length=1)


class Budget(_Strict):
    timeout_sec: float = Field(gt=0, le=MAX_TIME_LIMIT_SEC, allow_inf_nan=False)
    max_files_touched: int | None = Field(default=None, ge=1)
    network: NetworkPolicy = "none"
    sandbox: Literal["auto", "required"] = "auto"
    max_output_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_processes: int = Field(default=512, ge=8)
    max_workspace_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    max_diff_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_memory_mb: int = Field(default=4096, ge=64)

    @field_validator("network", mode="before")
    @classmethod
    def _network_policy(cls, value: Any) -> Any:
        """`false`/`true` (every spelling the field accepted when it was a bool) still mean
        `none`/`open`: a protocol sealed before the policy had names loads unchanged."""
        if isinstance(value, str) and value in NETWORK_POLICIES:
            return value
        try:
            return "open" if _BOOL.validate_python(value) else "none"
        except ValidationError:
            raise ValueError(f"must be none, model-api or open (false and true mean none and "
                             f"open), not {value!r}") from None

    @field_serializer("network")
    def _network_canonical(self, value: NetworkPolicy) -> bool | str:
        """The canonical form the identity hashes: `none` and `open` stay the booleans they
        were before the policy had names, so existing protocols keep their identity."""
        return {"none": False, "open": True}.get(value, value)


_BOOL: TypeAdapter[bool] = TypeAdapter(bool)


class Rules(_Strict):
    must_pass: list[str] = Field(default_factory=list)
    must_fail: list[str] = Field(default_factory=list)
    must_refuse: list[str] = Field(default_factory=list)

    def class_of(self) -> dict[str, str]:
        """Map each control id to the class its rule gives it."""
        return {tid: cls for cls in CONTROL_CLASSES for tid in getattr(self, cls)}


class NullPackRef(_Strict):
    path: str
    sha256: str = PENDING_SEAL
    rules: Rules = Field(default_factory=Rules)


class Publish(_Strict):
    min_n: int = Field(ge=1)
    require_ci: bool = True
    forbidden_fields: list[str] = Field(default_factory=list)
    ci_method: Literal["auto", "wilson", "clopper-pearson", "bootstrap"] = "auto"
    # "fixed": the stratum sizes are fixed by design, so the headline may be stratified
    strata: Literal["descriptive", "fixed"] = "descriptive"
    # infrastructure errors left after retries that a run may carry and still be published
    max_infrastructure_errors: int = Field(default=0, ge=0)


class SolverSpec(_Strict):
    # The seed's protocol names no source and its solver prints the diff: stdout is the default.
    diff_source: Literal["workspace", "stdout"] = "stdout"
    # blind: the solver sees an opaque per-run attempt id, never the task id (docs/running.md)
    task_ids: Literal["blind", "visible"] = "blind"
    # host environment variables passed to the solver (docs/running.md#the-solvers-environment);
    # the empty default is left out of the identity, so older identities stand
    env: list[str] = Field(default_factory=list)  # names checked in load(), with their lines


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot be passed to the solver (protocol `solver.env`, `run --env`), or None.
    HOME and SEALBENCH_* are sealbench's own: the solver gets them from the harness."""
    if not ENV_NAME_PATTERN.match(name):
        return f"'{name}' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    if name == "HOME" or name.startswith("SEALBENCH_"):
        return f"'{name}' is set by sealbench itself and cannot be passed through"
    return None


class ProtocolSpec(_Strict):
    """The parsed `protocol.yaml`. Field docs live in docs/protocol.md."""

    schema_: str = Field(alias="schema")
    protocol_id: str = Field(min_length=1)
    dataset: DatasetRef
    metric: MetricRef
    budget: Budget
    null_pack: NullPackRef
    publish: Publish
    solver: SolverSpec = Field(default_factory=SolverSpec)
    verifier: VerifierSpec | None = None
    environment: EnvironmentSpec | None = None


class TaskRow(BaseModel):
    """One line of a dataset or null-pack file. Extra keys are kept (hashed, never interpreted)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    oracle: str
    repo: str | None = None
    prompt: str = ""
    stratum: str | None = None
    cluster: str | None = None
    forbidden: list[str] = Field(default_factory=list)
    expected_class: ControlClass | None = None
    # hidden tests: a directory laid over the workspace root after the solver (docs/protocol.md)
    tests: str | None = None
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    # this task's solver timeout, in place of budget.timeout_sec (--timeout-scale applies)
    timeout_sec: float | None = Field(default=None, gt=0, le=MAX_TIME_LIMIT_SEC,
                                      allow_inf_nan=False)
    # a must_fail control whose grading contradicts its own oracle: an impossible variant of a
    # dataset task, which no honest solver can pass (docs/protocol.md#the-impossible-variant)
    impossible: bool = Field(default=False, strict=True)


@dataclass(frozen=True)
class Task:
    """A validated row with its paths resolved inside the protocol directory."""

    id: str
    kind: Kind
    oracle: Path
    repo: Path | None
    prompt: str
    stratum: str | None
    cluster: str | None
    forbidden: tuple[str, ...]
    expected_class: ControlClass | None
    source: str
    line: int
    tests: Path | None = None
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    timeout_sec: float | None = None  # overrides budget.timeout_sec for this task
    impossible: bool = False  # an impossible variant: its oracle must fail, not pass


@dataclass
class Protocol:
    """A loaded protocol directory: the spec, its tasks, and where each came from."""

    root: Path
    path: Path
    text: str
    spec: ProtocolSpec
    dataset: list[Task]
    null_pack: list[Task]
    lines: dict[tuple[str | int, ...], int] = field(default_factory=dict)
    dataset_rows: int = 0  # rows in the dataset file, valid or not (for the min_n check)

    @property
    def tasks(self) -> list[Task]:
        return [*self.null_pack, *self.dataset]

    def resolve(self, relative: str) -> Path:
        return (self.root / relative).resolve()


# --------------------------------------------------------------------------- YAML with lines


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one YAML mapping. PyYAML keeps the last value silently, so a second
    `publish:` block further down would lower `min_n` while a reader sees the first."""

    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(None, None, f"the key {str(key)!r} appears twice in one mapping "
                         f"(first at line {first.line + 1})", again)
        self.key = key
        self.first_line = first.line + 1


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` (nothing but plain data is ever constructed) that refuses a key given
    twice in one mapping, where PyYAML would keep the last value. Merge keys (`<<: *base`) are
    not duplicates: a key written beside them overrides the merged one, as YAML says."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: SafeLoader refuses it below
                if first is not key_node:
                    raise DuplicateKey(key, first.start_mark, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, refusing duplicate keys (UniqueKeyLoader): how sealbench reads every
    YAML document, protocol.yaml and protocol.sealed.yaml alike."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: plain data only


def yaml_line_map(text: str) -> dict[tuple[str | int, ...], int]:
    """Map each key path of a YAML document to its 1-based line, for error messages.

    `yaml.safe_load` forgets where things were; composing the node graph (no object
    construction, so it is as safe as safe_load) keeps the marks.
    """
    lines: dict[tuple[str | int, ...], int] = {}
    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                key_path = (*path, str(key.value))
                walk(value, key_path)
                lines[key_path] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index))

    if root is not None:
        walk(root, ())
    return lines


def _key_path(text: str, mark: yaml.Mark) -> tuple[str | int, ...] | None:
    """The key path of the mapping key written at `mark` (for naming a duplicate's field)."""
    found: list[tuple[str | int, ...]] = []

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                key_path = (*path, str(key.value))
                if key.start_mark.index == mark.index:
                    found.append(key_path)
                walk(value, key_path)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index))

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return found[0] if found else None


def line_of(lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...]) -> int | None:
    """The line of the deepest known prefix of loc (a missing key points at its parent)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def dotted(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in loc if part != "schema_") or "(document)"


def parse_yaml(path: Path, display_name: str) -> tuple[Any, str, dict[tuple[str | int, ...], int]]:
    """Read a YAML file safely, turning every failure into a located BadInput."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput("", [Problem(display_name, "file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput("", [Problem(display_name, f"cannot be read: {exc}")]) from None
    try:
        data = load_yaml(text)
        lines = yaml_line_map(text)
    except DuplicateKey as exc:
        assert exc.problem_mark is not None
        loc = _key_path(text, exc.problem_mark)
        problem = Problem(display_name, f"appears twice in one mapping (first at line "
                          f"{exc.first_line}); YAML would silently keep the later value, not "
                          "the one a reader sees first: keep one",
                          exc.problem_mark.line + 1, dotted(loc) if loc else str(exc.key))
        raise BadInput("", [problem]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = Problem(display_name, f"malformed YAML: {exc.problem}", line)
        raise BadInput("", [problem]) from None
    except yaml.YAMLError as exc:
        raise BadInput("", [Problem(display_name, f"malformed YAML: {exc}")]) from None
    return data, text, lines


def validate_spec(
    data: Any, lines: dict[tuple[str | int, ...], int], display_name: str
) -> ProtocolSpec:
    """Check the document against the v1 model, reporting every field problem at once."""
    if not isinstance(data, dict):
        raise BadInput("", [Problem(display_name, "must be a YAML mapping of protocol fields", 1)])
    schema = data.get("schema")
    if schema != SCHEMA:
        line = line_of(lines, ("schema",))
        msg = f"must be '{SCHEMA}', found {schema!r}; other schema versions are not supported"
        raise BadInput("", [Problem(display_name, msg, line, "schema")])
    try:
        return ProtocolSpec.model_validate(data)
    except ValidationError as exc:
        problems = [
            Problem(
                display_name,
                _pydantic_message(err),
                line_of(lines, tuple(err["loc"])),
                dotted(tuple(err["loc"])),
            )
            for err in exc.errors()
        ]
        raise BadInput("", problems) from None


def _pydantic_message(err: Any) -> str:
    if err["type"] in ("finite_number", "less_than_equal") and err["loc"] \
            and str(err["loc"][-1]).endswith("_sec"):
        return f"is {_number(err['input'])}; a time limit must be {TIME_LIMIT_RULE}"
    if err["type"] == "missing":
        return "is required but missing"
    if err["type"] == "extra_forbidden":
        return "is not a field of agent-bench-protocol/v1 (typo?)"
    return str(err["msg"]).rstrip(".").lower().replace("value error, ", "")


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else repr(value)


def scaled_time_limit_problem(protocol: Protocol, scale: float) -> Problem | None:
    """The largest solver or verifier time limit times `run --timeout-scale`, when that is past
    MAX_TIME_LIMIT_SEC or not finite (1e308 times 20 s overflows to infinity): the Problem
    naming its file, line and field, else None. (metric.timeout_sec is not scaled.)"""
    spec, name = protocol.spec, protocol.path.name
    limits: list[tuple[float, str, int | None, str]] = [
        (spec.budget.timeout_sec, name, line_of(protocol.lines, ("budget", "timeout_sec")),
         "budget.timeout_sec")]
    if spec.verifier is not None:
        limits.append((spec.verifier.timeout_sec, name,
                       line_of(protocol.lines, ("verifier", "timeout_sec")),
                       "verifier.timeout_sec"))
    limits += [(task.timeout_sec, task.source, task.line, "timeout_sec")
               for task in protocol.tasks if task.timeout_sec is not None]
    limit, source, line, fld = max(limits, key=lambda item: item[0])
    scaled = limit * scale
    if math.isfinite(scaled) and scaled <= MAX_TIME_LIMIT_SEC:
        return None
    gives = f"{scaled:g} s" if math.isfinite(scaled) else "an infinite time"
    return Problem(source, f"{limit:g} s times --timeout-scale {scale:g} gives {gives}; every "
                   f"time limit, scaled, must be {TIME_LIMIT_RULE}: give a smaller "
                   "--timeout-scale", line, fld)


# --------------------------------------------------------------------------- paths


def resolve_inside(root: Path, relative: str) -> tuple[Path | None, str | None]:
    """Resolve a protocol path, or say why it may not be used.

    Absolute paths, `..` escapes and symlinks whose target lies outside are all refused: the
    sealed identity must cover everything a score depends on, and nothing outside is sealed.
    """
    if not relative or not isinstance(relative, str):
        return None, "must be a non-empty path"
    if not lock_safe(relative):
        return None, (f"{shown_name(relative)} is not valid UTF-8, which the lock (JSON) cannot "
                      "record; rename the file")
    if os.path.isabs(relative):
        return None, f"'{relative}' is absolute; paths must be relative to the protocol directory"
    candidate = (root / relative).resolve()
    if not candidate.is_relative_to(root.resolve()):
        return None, f"'{relative}' leads outside the protocol directory"
    return candidate, None


def lock_safe(name: str) -> bool:
    """Whether a path can be recorded in the lock and read back: the lock is JSON in UTF-8,
    and a name that is not valid UTF-8 (a lone surrogate, from undecodable bytes) is written
    as an escape no JSON reader accepts, so every later verify would call the seal altered."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(name: str) -> str:
    """A path as the bytes it is on disk (`b'caf\\xe9.txt'`), for naming an undecodable one."""
    try:
        return repr(os.fsencode(name))
    except UnicodeEncodeError:  # a surrogate no file-name decoding made: show the code points
        return ascii(name)


def fixture_files(repo: Path) -> Iterator[Path]:
    """Every non-directory entry of a fixture, sorted, `.git` excluded, symlinks not followed."""
    for dirpath, dirnames, filenames in os.walk(repo, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        dirnames_links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted([*filenames, *dirnames_links]):
            yield Path(dirpath) / name
        dirnames[:] = [d for d in dirnames if d not in dirnames_links]


def symlink_escapes(link: Path, root: Path) -> bool:
    """True when a symlink inside a fixture points outside the protocol directory."""
    target = Path(os.path.normpath(link.parent / os.readlink(link)))
    return not target.is_relative_to(root.resolve()) and not target.is_relative_to(root)


# --------------------------------------------------------------------------- JSONL tasks


_UNDECODED = re.compile("[\udc80-\udcff]")


def read_task_rows(
    path: Path, display_name: str, kind: Kind, root: Path
) -> tuple[list[Task], list[Problem], int | None]:
    """Parse a task file line by line; collect every problem instead of stopping at the first.

    Also returns how many rows the file has, valid or not (None when it cannot be read).
    """
    tasks: list[Task] = []
    problems: list[Problem] = []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return [], [Problem(display_name, f"cannot be read: {exc.strerror or exc}")], None
    rows = 0
    # undecodable bytes become lone surrogates, so each such line is named (replaced bytes
    # would reach the prompt silently) and the others still load, numbered as before
    for number, line in enumerate(raw.decode("utf-8", errors="surrogateescape").splitlines(),
                                  start=1):
        if not line.strip():
            continue
        rows += 1
        if _UNDECODED.search(line):
            problems.append(Problem(display_name, "is not valid UTF-8 (JSON Lines must be); "
                                    "re-encode the file", number))
            continue
        task, row_problems = _parse_row(line, number, display_name, kind, root)
        problems.extend(row_problems)
        if task is not None:
            tasks.append(task)
    return tasks, problems, rows


class _DuplicateJSONKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (a task row's second `oracle` would be
    the one Python keeps, while a reader sees the first)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateJSONKey(key)
        data[key] = value
    return data


def _parse_row(
    line: str, number: int, display_name: str, kind: Kind, root: Path
) -> tuple[Task | None, list[Problem]]:
    def problem(message: str, fld: str | None = None) -> Problem:
        return Problem(display_name, message, number, fld)

    try:
        data = json.loads(line, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        return None, [problem(f"malformed JSON: {exc.msg} at column {exc.colno}")]
    except _DuplicateJSONKey as exc:
        return None, [problem("appears twice in one object; JSON readers disagree on which "
                              "copy counts (Python keeps the last): keep one", exc.key)]
    if not isinstance(data, dict):
        return None, [problem("must be a JSON object")]
    try:
        row = TaskRow.model_validate(data)
    except ValidationError as exc:
        return None, [problem(_pydantic_message(e), dotted(tuple(e["loc"]))) for e in exc.errors()]
    problems: list[Problem] = []
    if not TASK_ID_PATTERN.match(row.id):
        problems.append(problem(f"'{row.id}' is not a valid id ([A-Za-z0-9._-]+)", "id"))
    if kind == "null_pack" and row.expected_class is None:
        problems.append(problem("is required on null-pack rows", "expected_class"))
    if row.impossible and (kind != "null_pack" or row.expected_class != "must_fail"):
        problems.append(problem("only a must_fail control can be impossible (no honest "
                                "solver can pass it)", "impossible"))
    oracle, why = resolve_inside(root, row.oracle)
    if why:
        problems.append(problem(why, "oracle"))
    elif oracle is not None and not oracle.is_file():
        problems.append(problem(f"'{row.oracle}' does not exist", "oracle"))
    repo: Path | None = None
    if row.repo is not None:
        repo, why = resolve_inside(root, row.repo)
        if why:
            problems.append(problem(why, "repo"))
        elif repo is not None and not repo.is_dir():
            problems.append(problem(f"'{row.repo}' is not a directory", "repo"))
        elif repo is not None:
            problems.extend(problem(msg, "repo") for msg in _fixture_problems(repo, root))
    for index, forbidden in enumerate(row.forbidden):
        if os.path.isabs(forbidden) or ".." in Path(forbidden).parts or not forbidden:
            problems.append(
                problem(f"'{forbidden}' must be a path inside the workspace", f"forbidden.{index}")
            )
    tests: Path | None = None
    if row.tests is not None:
        tests, why = resolve_inside(root, row.tests)
        if why:
            problems.append(problem(why, "tests"))
        elif tests is not None and not tests.is_dir():
            problems.append(problem(f"'{row.tests}' is not a directory (hidden tests are a "
                                    "directory laid over the workspace root)", "tests"))
        elif tests is not None:
            problems.extend(problem(msg, "tests") for msg in _fixture_problems(tests, root))
    problems.extend(_test_id_problems(row, problem))
    if problems or oracle is None:
        return None, problems
    return Task(
        id=row.id,
        kind=kind,
        oracle=oracle,
        repo=repo,
        prompt=row.prompt,
        stratum=row.stratum,
        cluster=row.cluster,
        forbidden=tuple(os.path.normpath(f) for f in row.forbidden),
        expected_class=row.expected_class,
        source=display_name,
        line=number,
        tests=tests,
        fail_to_pass=tuple(row.fail_to_pass),
        pass_to_pass=tuple(row.pass_to_pass),
        timeout_sec=row.timeout_sec,
        impossible=row.impossible,
    ), []


def _test_id_problems(row: TaskRow, problem: Any) -> list[Problem]:
    """A test id listed twice, or both as FAIL_TO_PASS and PASS_TO_PASS, is a typo that would
    silently change what "resolved" means."""
    problems: list[Problem] = []
    for fld in ("fail_to_pass", "pass_to_pass"):
        seen: set[str] = set()
        for index, test_id in enumerate(getattr(row, fld)):
            if not test_id.strip():
                problems.append(problem("must be a non-empty test id", f"{fld}.{index}"))
            elif test_id in seen:
                problems.append(problem(f"lists '{test_id}' twice", f"{fld}.{index}"))
            seen.add(test_id)
    for test_id in sorted(set(row.fail_to_pass) & set(row.pass_to_pass)):
        problems.append(problem(f"'{test_id}' is in both fail_to_pass and pass_to_pass",
                                "pass_to_pass"))
    return problems


def _fixture_problems(repo: Path, root: Path) -> list[str]:
    """Names the lock cannot record (not UTF-8), symlinks leading out, and `.git` files: a
    vendored submodule's pointer names a repository outside the fixture, which git in the
    workspace would follow."""
    problems = []
    for path in fixture_files(repo):
        relative = str(path.relative_to(repo))
        if not lock_safe(relative):
            problems.append(f"file name {shown_name(relative)} is not valid UTF-8, which the "
                            "lock (JSON) cannot record; rename it")
        elif path.is_symlink() and not lock_safe(os.readlink(path)):
            problems.append(f"symlink '{relative}' points to {shown_name(os.readlink(path))}, "
                            "which is not valid UTF-8; point it at a UTF-8 path")
        elif path.name == ".git" and not path.is_symlink():
            problems.append(f"'{path.relative_to(repo)}' is a .git file (a submodule or "
                            "worktree pointer), which points outside the fixture; replace it "
                            "with the submodule's files or remove it")
        elif path.is_symlink() and symlink_escapes(path, root):
            problems.append(f"symlink '{path.relative_to(repo)}' leads outside the protocol "
                            "directory")
    return problems


# --------------------------------------------------------------------------- whole protocol


def load(directory: Path | str, *, sealed: bool = False) -> Protocol:
    """Load `protocol.yaml` (or the sealed copy) and its task files, validating everything.

    Raises BadInput listing every problem found, each with file, line and field.
    """
    root = Path(directory).resolve()
    if not root.is_dir():
        raise BadInput(f"{directory}: protocol directory not found")
    name = SEALED_FILE if sealed else PROTOCOL_FILE
    data, text, lines = parse_yaml(protocol_file(root, name), name)
    spec = validate_spec(data, lines, name)
    problems: list[Problem] = []
    loaded: dict[Kind, list[Task]] = {"dataset": [], "null_pack": []}
    dataset_rows: int | None = None
    sources: tuple[tuple[Kind, str], ...] = (("dataset", spec.dataset.path),
                                             ("null_pack", spec.null_pack.path))
    for kind, ref_path in sources:
        loc: tuple[str | int, ...] = (kind, "path")
        task_file, why = resolve_inside(root, ref_path)
        if why or task_file is None:
            problems.append(Problem(name, why or "", line_of(lines, loc), dotted(loc)))
            continue
        if not task_file.is_file():
            problems.append(
                Problem(name, f"'{ref_path}' does not exist", line_of(lines, loc), dotted(loc))
            )
            continue
        tasks, row_problems, rows = read_task_rows(task_file, _rel(task_file, root), kind, root)
        loaded[kind] = tasks
        problems.extend(row_problems)
        if kind == "dataset":
            dataset_rows = rows
    refs = [(("metric", "module"), spec.metric.module)]
    if spec.environment is not None:
        refs.append((("environment", "requirements"), spec.environment.requirements))
    for loc, ref in refs:
        if ref is None:
            continue
        found, why = resolve_inside(root, ref)
        if why:
            problems.append(Problem(name, why, line_of(lines, loc), dotted(loc)))
        elif found is not None and not found.is_file():
            problems.append(Problem(name, f"'{ref}' does not exist", line_of(lines, loc),
                                    dotted(loc)))
    problems.extend(_env_problems(spec, lines, name))
    protocol = Protocol(root, root / name, text, spec, loaded["dataset"], loaded["null_pack"],
                        lines, dataset_rows or 0)
    problems.extend(_cross_checks(protocol, name, dataset_rows is not None))
    if problems:
        raise BadInput(f"{name}: {len(problems)} problem(s)", problems)
    return protocol


def protocol_file(root: Path, name: str) -> Path:
    """`root / name` (protocol.yaml or protocol.sealed.yaml), held to the rule every other path
    of a protocol follows: a symlink is fine while it resolves inside the directory, and one
    leading out is refused, naming it (exit 2)."""
    path = root / name
    if path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            raise BadInput("", [Problem(name, f"is a symlink leading outside the protocol "
                                        f"directory (to {target}); every path of a protocol "
                                        "must resolve inside it: put the file itself there")])
    return path


def _env_problems(spec: ProtocolSpec, lines: dict[tuple[str | int, ...], int],
                  name: str) -> list[Problem]:
    """Each `solver.env` entry must be a variable name sealbench may pass, listed once."""
    problems: list[Problem] = []
    for index, env_name in enumerate(spec.solver.env):
        loc: tuple[str | int, ...] = ("solver", "env", index)
        why = env_name_problem(env_name)
        if why is None and env_name in spec.solver.env[:index]:
            why = f"lists '{env_name}' twice"
        if why is not None:
            problems.append(Problem(name, why, line_of(lines, loc), dotted(loc)))
    return problems


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def _cross_checks(protocol: Protocol, name: str, dataset_read: bool) -> list[Problem]:
    """Checks that span files: unique ids, rules agreeing with rows, publish floor."""
    problems: list[Problem] = []
    loc: tuple[str | int, ...]
    seen: dict[str, Task] = {}
    for task in protocol.tasks:
        if task.id in seen:
            first = seen[task.id]
            problems.append(
                Problem(
                    task.source,
                    f"duplicate id '{task.id}' (first at {first.source}:{first.line})",
                    task.line,
                    "id",
                )
            )
        else:
            seen[task.id] = task
    spec, lines = protocol.spec, protocol.lines
    rule_class = spec.null_pack.rules.class_of()
    controls = {t.id: t for t in protocol.null_pack}
    for cls in CONTROL_CLASSES:
        for index, tid in enumerate(getattr(spec.null_pack.rules, cls)):
            loc = ("null_pack", "rules", cls, index)
            if tid not in controls:
                problems.append(
                    Problem(
                        name,
                        f"names '{tid}', which is not a row of {spec.null_pack.path}",
                        line_of(lines, loc),
                        dotted(loc),
                    )
                )
    for task in protocol.null_pack:
        expected = rule_class.get(task.id)
        if expected is None:
            problems.append(
                Problem(task.source, f"'{task.id}' is not listed in any null_pack.rules list",
                        task.line, "id")
            )
        elif expected != task.expected_class:
            problems.append(
                Problem(
                    task.source,
                    f"says {task.expected_class} but null_pack.rules lists '{task.id}' "
                    f"under {expected}",
                    task.line,
                    "expected_class",
                )
            )
    if dataset_read and protocol.dataset_rows < spec.publish.min_n:
        loc = ("publish", "min_n")
        problems.append(
            Problem(
                name,
                f"is {spec.publish.min_n} but the dataset has only {protocol.dataset_rows} tasks",
                line_of(lines, loc),
                dotted(loc),
            )
        )
    problems += _strata_problems(protocol, name)
    problems += _verifier_problems(protocol, name)
    for index, value in enumerate(spec.publish.forbidden_fields):
        if value not in KNOWN_FORBIDDEN_FIELDS:
            loc = ("publish", "forbidden_fields", index)
            problems.append(
                Problem(name, f"'{value}' is unknown (known: {', '.join(KNOWN_FORBIDDEN_FIELDS)})",
                        line_of(lines, loc), dotted(loc))
            )
    return problems


def _verifier_problems(protocol: Protocol, name: str) -> list[Problem]:
    """Hidden tests and test-based grading need a verifier to run them: without one they
    would be sealed, hashed, and silently never run."""
    if protocol.spec.verifier is not None:
        loc = ("verifier", "command")
        why = verifier_command_problem(protocol.spec.verifier.command)
        return [] if why is None else [Problem(name, why, line_of(protocol.lines, loc),
                                               dotted(loc))]
    problems = [Problem(task.source, "declares hidden tests or test ids, but protocol.yaml "
                        "has no verifier to run them", task.line,
                        "tests" if task.tests is not None else "fail_to_pass")
                for task in protocol.tasks
                if task.tests is not None or task.fail_to_pass or task.pass_to_pass]
    if protocol.spec.metric.builtin == "tests_v1":
        loc = ("metric", "builtin")
        problems.append(Problem(name, "is 'tests_v1', which grades by the verifier's test "
                                "results, but protocol.yaml has no verifier",
                                line_of(protocol.lines, loc), dotted(loc)))
    return problems


def verifier_command_problem(command: str) -> str | None:
    """Why a verifier command cannot be run, or None (it is split like a shell line)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return f"cannot be split into arguments: {exc}"
    if not argv:
        return "is empty"
    if argv[0] == "{tests}":
        return "must start with a program, not {tests}"
    return None


def _strata_problems(protocol: Protocol, name: str) -> list[Problem]:
    """With `publish.strata: fixed` the headline is stratified, so every dataset task needs a
    stratum, every stratum at least 2 tasks (a one-task stratum has no variance estimate and
    would make the interval look more certain than the data allow) and every cluster must lie
    inside one stratum (a stratified cluster design; docs/statistics.md)."""
    if protocol.spec.publish.strata != "fixed":
        return []
    loc = ("publish", "strata")
    problems = [Problem(task.source, "has no stratum, but publish.strata is 'fixed'", task.line,
                        "stratum") for task in protocol.dataset if task.stratum is None]
    sizes: dict[str, int] = {}
    for task in protocol.dataset:
        if task.stratum is not None:
            sizes[task.stratum] = sizes.get(task.stratum, 0) + 1
    small = sorted(stratum for stratum, size in sizes.items() if size < 2)
    if small:
        problems.append(Problem(
            name, "is 'fixed' but these strata have fewer than 2 tasks: " + ", ".join(
                f"'{stratum}'" for stratum in small), line_of(protocol.lines, loc), dotted(loc)))
    owner: dict[str, str] = {}
    for task in protocol.dataset:
        if task.cluster is None or task.stratum is None:
            continue
        first = owner.setdefault(task.cluster, task.stratum)
        if first != task.stratum:
            problems.append(Problem(
                task.source, f"cluster '{task.cluster}' is in stratum '{first}' and "
                f"'{task.stratum}'; with publish.strata 'fixed' a cluster must lie inside one "
                "stratum", task.line, "cluster"))
            owner[task.cluster] = task.stratum  # name each further crossing once more at most
    return problems
