"""The typed formats (sealbench/formats.py) and the schemas shipped from them (sealbench/schemas).

Golden tests: each shipped schema is exactly what the models generate now, in the package and
in docs/schemas/ — a format cannot change silently. Then the models and schemas against real
output: every report variant a run can publish validates, an unknown key or an impossible figure
does not, and what `export`, `show --format json` and the run header hold matches its model.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest
from format_checks import CHECKED, problems, validator
from pydantic import ValidationError
from toy import SOLVER, make_protocol, make_tested_protocol, write_solver

from sealbench import formats
from sealbench.compare import COMPARE_FORMAT
from sealbench.events import EVENTS_VERSION
from sealbench.ledger import Ledger
from sealbench.report import REPORT_FORMAT
from sealbench.schemas import (
    DOCS_DIR,
    SCHEMAS,
    file_name,
    generated_text,
    shipped_text,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_SCHEMAS = ROOT / "src" / "sealbench" / "schemas"
GOLDEN_REPORT = ROOT / "tests" / "data" / "golden_report.json"
REGENERATE = "regenerate the shipped schemas with `make schemas` (python -m sealbench.schemas)"


# ------------------------------------------------------------------------------ golden schemas


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_shipped_schema_is_generated_from_the_models(name: str) -> None:
    generated = generated_text(name)
    assert (PACKAGE_SCHEMAS / file_name(name)).read_text() == generated, \
        f"the {name} models changed: {REGENERATE}"
    assert (DOCS_DIR / file_name(name)).read_text() == generated, \
        f"docs/schemas/{file_name(name)} differs from the package's copy: {REGENERATE}"
    assert shipped_text(name) == generated  # what `sealbench schema NAME` prints


def test_every_shipped_file_is_in_the_registry() -> None:
    """A schema left behind after its format was dropped (or renamed) is not shipped."""
    for directory in (PACKAGE_SCHEMAS, DOCS_DIR):
        assert sorted(p.name for p in directory.glob("*.schema.json")) == sorted(
            file_name(name) for name in SCHEMAS)


def test_the_schemas_are_package_data() -> None:
    """An installed wheel carries them: `sealbench schema` reads them from the package."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "schemas/*.schema.json" in config["tool"]["setuptools"]["package-data"]["sealbench"]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_shipped_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    schema = json.loads(shipped_text(name))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/" + file_name(name))
    validator(name) if name in CHECKED.values() else None  # check_schema raises if not


@pytest.mark.parametrize(("model", "constant"), [
    (formats.Report, REPORT_FORMAT),
    (formats.Comparison, COMPARE_FORMAT),
    (formats.ExportLine, "sealbench-export/v2"),
], ids=["report", "comparison", "export"])
def test_each_model_carries_the_version_the_code_writes(model: Any, constant: str) -> None:
    (version,) = get_args(model.model_fields["format"].annotation)
    assert version == constant
    assert CHECKED[constant] in SCHEMAS


def test_the_events_schema_is_the_stream_version() -> None:
    assert json.loads(shipped_text("events"))["title"].startswith(
        f"sealbench run event stream, v{EVENTS_VERSION}")


# -------------------------------------------------------------------- what the models refuse


def golden_report() -> dict[str, Any]:
    """tests/data/golden_report.json with its volatile fields filled in as a run fills them."""
    report: dict[str, Any] = json.loads(GOLDEN_REPORT.read_text())
    report["timings"] = {"started_at": "2026-12-01T00:00:00Z",
                         "finished_at": "2026-12-01T00:00:01Z", "attempts": 7,
                         "attempt_seconds_total": 1.5}
    report["records"].update(ledger="/l.sqlite", artifacts="/l.sqlite.artifacts",
                             chain_head="a" * 64)
    report["solver"]["command"] = "python solve.py"
    report["sealbench_version"] = "0.1.0"
    report["versions"] = {"python": "3.11.7", "numpy": "2", "scipy": "1", "sealbench": "0.1.0"}
    return report


def test_the_golden_report_validates() -> None:
    report = golden_report()
    formats.Report.model_validate_json(json.dumps(report))
    assert problems(report) == []


def _set(path: str, value: Any) -> Any:
    def change(report: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = report
        for key in parents:
            node = node[key]
        node[last] = value
    return change


def _drop(key: str) -> Any:
    return lambda report: report.pop(key)


@pytest.mark.parametrize(("change", "where"), [
    (_set("surprise", 1), "surprise"),  # an unknown key: the format is closed
    (_set("interval.surprise", 1), "interval"),
    (_set("null_pack.passed", False), "null_pack"),  # a report exists only after the gate
    (_set("mean", 1.5), "mean"),
    (_set("ci95", [0.1, 0.2, 0.3]), "ci95"),
    (_set("n", -1), "n"),
    (_set("ci_method", "eyeballed"), "ci_method"),
    (_set("identity", "sha256:xyz"), "identity"),
    (_set("outcomes.pass", "3"), "outcomes"),
    (_set("signature", {"algorithm": "ed25519", "key_fingerprint": "0" * 64,
                        "public_key": "k", "value": "v", "note": "unsigned"}), "signature"),
    (_drop("ci95"), "(top)"),
    (_drop("null_pack"), "(top)"),
], ids=["unknown key", "unknown nested key", "gate failed", "mean above 1", "three bounds",
        "negative n", "unknown method", "bad identity", "count as text", "unsigned signature field",
        "no interval", "no null pack"])
def test_a_report_outside_the_format_is_refused(change: Any, where: str) -> None:
    report = golden_report()
    change(report)
    with pytest.raises(ValidationError):
        formats.Report.model_validate_json(json.dumps(report))
    found = problems(report)
    assert found and any(where in p for p in found), found


def test_keys_older_runs_lack_may_be_absent() -> None:
    """A run recorded before the network policy had names has no `network`/`allow_hosts`; its
    report still verifies, so it must still validate."""
    report = golden_report()
    report.pop("network", None)
    report.pop("allow_hosts", None)
    assert problems(report) == []
    formats.Report.model_validate_json(json.dumps(report))


# ----------------------------------------------------------- every published report variant


def _publish_yaml(proto: Path, lines: str) -> Path:
    yaml = proto / "protocol.yaml"
    yaml.write_text(yaml.read_text().replace("publish:\n", "publish:\n" + lines))
    return proto


# the toy solver, except that it breaks toy-001 and toy-004 (one in each stratum): an interval
# of all passes is degenerate, and a bootstrap or fixed strata would give way to Wilson
MIXED = SOLVER + ("if m and path == 'app.txt' and any(f'colour {i} is' in open(path).read()"
                  " for i in (1, 4)):\n    open('app.txt', 'a').write('oops\\n')\n")
SANDBOXED = ("signed",)  # --sign refuses --sandbox none: the solver could read the key

VARIANTS = {
    # protocol maker, extra run arguments
    "strata and clusters": (lambda root: make_protocol(root, n=6, min_n=4), []),
    "independent tasks": (lambda root: make_protocol(root, n=6, min_n=4, clusters=None), []),
    "epochs, pass^k": (lambda root: make_protocol(root, n=6, min_n=4), ["--epochs", "3"]),
    "fixed strata": (lambda root: _publish_yaml(make_protocol(root, n=6, min_n=4, clusters=None),
                                                "  strata: fixed\n"), []),
    "bootstrap": (lambda root: _publish_yaml(make_protocol(root, n=6, min_n=4, clusters=None),
                                             "  ci_method: bootstrap\n"), []),
    "blind ids": (lambda root: make_protocol(root, n=6, min_n=4, task_ids="blind"), []),
    "tests_v1 grading": (lambda root: make_tested_protocol(root, n=4, min_n=3), []),
    "signed": (lambda root: make_protocol(root, n=6, min_n=4), ["--sign", "KEY"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    pytest.param(v, marks=pytest.mark.sandbox) if v in SANDBOXED else v for v in VARIANTS])
def test_every_published_report_variant_validates(variant: str, tmp_path: Path, cli: Any
                                                  ) -> None:
    """Acceptance 4: what `sealbench schema report` prints validates each kind of report a run
    publishes — and the export and run header of the same run match theirs."""
    make, extra = VARIANTS[variant]
    proto = make(tmp_path / "proto")
    ledger = tmp_path / "ledger.sqlite"
    if "KEY" in extra:
        assert cli("keygen", tmp_path / "key").exit_code == 0
        extra = [str(tmp_path / "key") if a == "KEY" else a for a in extra]
    assert cli("seal", proto, "--ledger", ledger).exit_code == 0
    sandbox = [] if variant in SANDBOXED else ["--sandbox", "none"]
    done = cli("run", proto, "--solver", write_solver(tmp_path / "solver", MIXED), *sandbox,
               "--run-id", "r1", "-q", "--ledger", ledger, *extra)
    assert done.exit_code == 0, done.stderr
    report = json.loads((tmp_path / "reports" / "r1.json").read_text())
    schema = json.loads(cli("schema", "report").stdout)
    errors = list(validator("report").iter_errors(report))
    assert schema == validator("report").schema and errors == [], errors
    formats.Report.model_validate_json(json.dumps(report))
    expected = {"epochs, pass^k": lambda r: len(r["pass_at_k"]) == 3,
                "fixed strata": lambda r: r["interval"]["stratified"],
                "bootstrap": lambda r: r["interval"]["resamples"] > 0,
                "independent tasks": lambda r: r["ci_method"] == "wilson",
                "strata and clusters": lambda r: r["strata"] and r["interval"]["clusters"],
                "signed": lambda r: "signature" in r,
                "blind ids": lambda r: r["task_ids"] == "blind"}.get(variant, lambda r: True)
    assert expected(report), report  # the variant really is the one named
    exported = cli("export", "r1", "--ledger", ledger)
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines and all(problems(line) == [] for line in lines)
    if variant == "tests_v1 grading":
        assert any(line["record"].get("tests") for line in lines)
    header = Ledger(ledger).links("r1")[0]
    assert header.kind == "header"
    formats.RunHeader.model_validate_json(json.dumps(header.body))


@pytest.mark.slow
def test_a_refused_run_or_a_trial_writes_no_report(tmp_path: Path, cli: Any) -> None:
    """No report file exists to validate when the gate fails or for a trial: nothing with a
    rate is written before the gate passes."""
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    ledger = tmp_path / "ledger.sqlite"
    assert cli("seal", proto, "--ledger", ledger).exit_code == 0
    idle = write_solver(tmp_path / "idle", "pass\n")  # fixes nothing: NP-STUB-01 fails
    refused = cli("run", proto, "--solver", idle, "--sandbox", "none", "--run-id", "bad", "-q",
                  "--ledger", ledger)
    assert refused.exit_code == 3, refused.stderr
    trial = cli("run", proto, "--solver", write_solver(tmp_path / "solver"), "--sandbox",
                "none", "--task", "toy-001", "--run-id", "t1", "-q", "--ledger", ledger)
    assert trial.exit_code == 0, trial.stderr
    written = sorted(p.name for p in tmp_path.rglob("*.json"))
    assert not [name for name in written if name.startswith(("bad", "t1"))], written


@pytest.mark.slow
def test_show_json_attempts_match_the_attempt_record(tmp_path: Path, cli: Any) -> None:
    """`show --format json` prints each record as stored, and must not import pydantic
    (tests/test_startup.py), so the model checks it here instead of at run time."""
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    ledger = tmp_path / "ledger.sqlite"
    assert cli("seal", proto, "--ledger", ledger).exit_code == 0
    assert cli("run", proto, "--solver", write_solver(tmp_path / "solver"), "--sandbox", "none",
               "--run-id", "r1", "-q", "--ledger", ledger).exit_code == 0
    shown = json.loads(cli("show", "r1", "--format", "json", "--ledger", ledger).stdout)
    from pydantic import TypeAdapter

    records: TypeAdapter[Any] = TypeAdapter(formats.AttemptRecord)
    assert len(shown["attempts"]) == 7
    for attempt in shown["attempts"]:
        records.validate_json(json.dumps(attempt["record"]))


# ------------------------------------------------------------------ the module and the guard


def test_formats_is_a_leaf_module() -> None:
    """It imports pydantic and the standard library only, so any module may import it
    (and board's leaderboard models can live in it) without an import cycle."""
    import ast
    import sys

    tree = ast.parse((ROOT / "src" / "sealbench" / "formats.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - {"__future__"} <= {"pydantic"} | set(sys.stdlib_module_names), imported


def test_conforming_returns_the_document_itself() -> None:
    from sealbench.errors import conforming

    report = golden_report()
    assert conforming(formats.Report, report, "the golden report") is report


@pytest.mark.parametrize(("change", "field"), [
    (_set("surprise", 1), "surprise"),
    (_set("outcomes.pass", "3"), "outcomes.pass"),
    (_set("null_pack.passed", False), "null_pack.passed"),
], ids=["unknown key", "count as text", "gate failed"])
def test_a_document_outside_its_format_is_refused_in_one_line(change: Any, field: str) -> None:
    """What sealbench would refuse to write (a bug of its own): exit 3, one line, the field."""
    from sealbench.errors import EXIT_REFUSED, FormatViolation, conforming

    report = golden_report()
    change(report)
    with pytest.raises(FormatViolation) as caught:
        conforming(formats.Report, report, "the report of run golden-run")
    message = str(caught.value)
    assert caught.value.exit_status == EXIT_REFUSED and "\n" not in message
    assert message.startswith("internal error: the report of run golden-run does not match its "
                              f"format (Report, field '{field}'")


@pytest.mark.parametrize(("document", "model"), [
    (lambda: {**golden_report(), "solver": {**golden_report()["solver"],
                                             "command": "python /tmp/\udcff/solve.py"}},
     formats.Report),
    (lambda: {**golden_report(), "exposed": ["/srv/\udce9t\udce9"]}, formats.Report),
], ids=["solver path not UTF-8", "exposed path not UTF-8"])
def test_a_path_that_is_not_utf8_does_not_stop_a_report(document: Any, model: Any) -> None:
    """A careless operator's path with a byte that is not UTF-8 (`run --expose`) reaches the
    report as a lone surrogate, written as a "\\udcff" escape; the report is still in its format
    and is written as before (pydantic's JSON parser alone would refuse the escape)."""
    from sealbench.errors import conforming

    report = document()
    assert conforming(model, report, "the report") is report
    assert problems(json.loads(json.dumps(report))) == []


def test_an_export_line_with_a_non_utf8_forbidden_path_is_still_written() -> None:
    """A solver that writes `secrets/<byte 0xff>` under a forbidden pattern: the record names
    the path with a lone surrogate, and export still writes the line, byte for byte."""
    from sealbench.errors import conforming_json

    line = {"format": "sealbench-export/v2", "run_id": "r", "protocol_id": "p",
            "identity": "sha256:" + "a" * 64, "solver": "s", "sandbox": "bwrap",
            "ci_method": "auto", "strata": "descriptive", "min_n": 1, "epochs": 1,
            "rules": {"NP-STUB-01": "must_pass"}, "seq": 3, "phase": "dataset",
            "task_id": "toy-001", "epoch": 0, "prev_digest": "0" * 64, "digest": "1" * 64,
            "record": {"outcome": "violation", "detail": "wrote a forbidden path", "score": 0,
                       "diff": "2" * 64, "stdout": "3" * 64, "stderr": "4" * 64,
                       "metric": None, "files_touched": 1,
                       "forbidden_written": ["secrets/\udcff"], "returncode": 0,
                       "duration": 0.5}}
    text = json.dumps(line, sort_keys=True)
    assert conforming_json(formats.ExportLine, text, "the line") == text
    assert problems(line) == []

