"""Bad input: one clear line naming file, line and field, exit 2, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from sealbench.errors import BadInput
from sealbench.protocol import Budget, load, yaml_line_map


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write_rows(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _seal_fails(cli, toy: Path) -> str:  # type: ignore[no-untyped-def]
    result = cli("seal", toy)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + result.stderr
    return result.stderr.strip()


def test_malformed_yaml_names_file_and_line(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    text = (toy / "protocol.yaml").read_text().replace("  timeout_sec: 20", "  timeout_sec: [20")
    (toy / "protocol.yaml").write_text(text)
    message = _seal_fails(cli, toy)
    line = text.splitlines().index("  timeout_sec: [20") + 1
    assert message.count("\n") == 0
    assert message.startswith("sealbench: protocol.yaml:")
    assert "malformed YAML" in message
    reported = int(message.split("protocol.yaml:")[1].split(":")[0])
    assert line <= reported <= line + 2


def test_malformed_jsonl_line(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    dataset = toy / "tasks" / "dataset.jsonl"
    lines = dataset.read_text().splitlines()
    lines[2] = lines[2][:-1]  # drop the closing brace
    dataset.write_text("\n".join(lines) + "\n")
    message = _seal_fails(cli, toy)
    assert message == (f"sealbench: tasks/dataset.jsonl:3: malformed JSON: Expecting ',' "
                       f"delimiter at column {len(lines[2]) + 1}")


def test_duplicate_id(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    dataset = toy / "tasks" / "dataset.jsonl"
    rows = _rows(dataset)
    rows[3]["id"] = rows[1]["id"]
    _write_rows(dataset, rows)
    message = _seal_fails(cli, toy)
    assert message == ("sealbench: tasks/dataset.jsonl:4: field 'id': duplicate id 'toy-001' "
                       "(first at tasks/dataset.jsonl:2)")


def test_missing_oracle(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    (toy / "oracles" / "toy-002.patch").unlink()
    message = _seal_fails(cli, toy)
    assert message == ("sealbench: tasks/dataset.jsonl:3: field 'oracle': "
                       "'oracles/toy-002.patch' does not exist")


@pytest.mark.parametrize("escape", ["../../etc/passwd", "/etc/passwd", "oracles/../../x"])
def test_oracle_escaping_the_protocol_dir(cli, toy: Path, escape: str) -> None:  # type: ignore[no-untyped-def]
    dataset = toy / "tasks" / "dataset.jsonl"
    rows = _rows(dataset)
    rows[0]["oracle"] = escape
    _write_rows(dataset, rows)
    message = _seal_fails(cli, toy)
    assert message.startswith("sealbench: tasks/dataset.jsonl:1: field 'oracle': ")
    assert escape in message
    assert "outside the protocol directory" in message or "absolute" in message


def test_symlinked_oracle_leading_out_is_refused(cli, toy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside.patch"
    outside.write_text("x")
    oracle = toy / "oracles" / "toy-000.patch"
    oracle.unlink()
    os.symlink(outside, oracle)
    message = _seal_fails(cli, toy)
    assert message == ("sealbench: tasks/dataset.jsonl:1: field 'oracle': "
                       "'oracles/toy-000.patch' leads outside the protocol directory")


def test_fixture_symlink_leading_out_is_refused(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    os.symlink("/etc/passwd", toy / "fixtures" / "toy-001" / "passwd")
    message = _seal_fails(cli, toy)
    assert message == ("sealbench: tasks/dataset.jsonl:2: field 'repo': symlink 'passwd' "
                       "leads outside the protocol directory")


def test_rule_naming_unknown_id(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    path = toy / "protocol.yaml"
    text = path.read_text().replace('must_fail: ["NP-POISON-01"]',
                                    'must_fail: ["NP-POISON-01", "NP-GHOST"]')
    path.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "NP-GHOST" in s)
    message = _seal_fails(cli, toy)
    assert message == (f"sealbench: protocol.yaml:{line}: field 'null_pack.rules.must_fail.1': "
                       "names 'NP-GHOST', which is not a row of ./tasks/null.jsonl")


def test_wrong_schema(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    path = toy / "protocol.yaml"
    path.write_text(path.read_text().replace("agent-bench-protocol/v1", "agent-bench-protocol/v2"))
    message = _seal_fails(cli, toy)
    assert message.startswith("sealbench: protocol.yaml:1: field 'schema': must be "
                              "'agent-bench-protocol/v1'")


def test_unknown_field_is_a_typo_not_a_default(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    path = toy / "protocol.yaml"
    text = path.read_text().replace("max_files_touched: 3", "max_files_touchd: 3")
    path.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "touchd" in s)
    message = _seal_fails(cli, toy)
    assert message == (f"sealbench: protocol.yaml:{line}: field 'budget.max_files_touchd': "
                       "is not a field of agent-bench-protocol/v1 (typo?)")


def test_every_problem_is_reported_at_once(toy: Path) -> None:
    (toy / "oracles" / "toy-000.patch").unlink()
    (toy / "oracles" / "toy-003.patch").unlink()
    null = toy / "tasks" / "null.jsonl"
    rows = _rows(null)
    rows[0]["expected_class"] = "must_fail"
    _write_rows(null, rows)
    with pytest.raises(BadInput) as caught:
        load(toy)
    lines = caught.value.lines()
    assert len(lines) == 3
    assert any("toy-000.patch" in line for line in lines)
    assert any("toy-003.patch" in line for line in lines)
    assert any("tasks/null.jsonl:1: field 'expected_class'" in line for line in lines)


def test_dataset_below_min_n(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    path = toy / "protocol.yaml"
    path.write_text(path.read_text().replace("min_n: 3", "min_n: 10"))
    message = _seal_fails(cli, toy)
    assert "field 'publish.min_n': is 10 but the dataset has only 4 tasks" in message


def test_missing_protocol_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "empty").mkdir()
    result = cli("seal", tmp_path / "empty")
    assert result.exit_code == 2
    assert result.stderr.strip() == "sealbench: protocol.yaml: file not found"


TWICE = ("appears twice in one mapping (first at line {first}); YAML would silently keep the "
         "later value, not the one a reader sees first: keep one")


def test_a_second_publish_block_is_refused_not_silently_taken(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    """Attack (issue 22): a second `publish:` block at the end lowered min_n to 1 while a
    reader of the file saw the first. PyYAML keeps the last value silently; sealbench refuses
    the key, naming file, line (the second) and field."""
    path = toy / "protocol.yaml"
    text = path.read_text()
    first = text.splitlines().index("publish:") + 1
    path.write_text(text + "publish:\n  min_n: 1\n")
    again = len(text.splitlines()) + 1
    assert _seal_fails(cli, toy) == (f"sealbench: protocol.yaml:{again}: field 'publish': "
                                     + TWICE.format(first=first))


@pytest.mark.parametrize(("edit", "field"), [
    (("  max_files_touched: 3\n", "  max_files_touched: 3\n  timeout_sec: 5\n"),
     "budget.timeout_sec"),
    (('    must_pass: ["NP-STUB-01"]\n', '    must_pass: ["NP-STUB-01"]\n    must_pass: []\n'),
     "null_pack.rules.must_pass"),
    (("  path: ./tasks/dataset.jsonl\n", "  {path: ./tasks/dataset.jsonl, path: ./x.jsonl}\n"
      .replace("  {", "  nested: {")), "dataset.nested.path"),
])
def test_a_duplicate_key_anywhere_is_named_with_its_field(cli, toy: Path, edit: tuple[str, str],  # type: ignore[no-untyped-def]
                                                          field: str) -> None:
    path = toy / "protocol.yaml"
    text = path.read_text().replace(*edit)
    path.write_text(text)
    message = _seal_fails(cli, toy)
    assert message.count("\n") == 0
    assert f": field '{field}': appears twice in one mapping (first at line " in message
    assert message.startswith("sealbench: protocol.yaml:")


def test_merge_keys_are_not_duplicates(toy: Path) -> None:
    """`<<: *base` with a key written beside it overriding the merged one is YAML's rule, not
    a duplicate."""
    path = toy / "protocol.yaml"
    text = path.read_text().replace("budget:\n  timeout_sec: 20\n  max_files_touched: 3\n",
                                    "budget:\n  <<: &limits {timeout_sec: 99, max_files_touched: 3}"
                                    "\n  timeout_sec: 20\n")
    path.write_text(text)
    assert load(toy).spec.budget.timeout_sec == 20


def test_a_duplicate_key_in_the_sealed_file_is_refused_too(toy: Path) -> None:
    """protocol.sealed.yaml is read by the same loader (verify, run)."""
    (toy / "protocol.sealed.yaml").write_text((toy / "protocol.yaml").read_text()
                                              + "publish:\n  min_n: 1\n")
    with pytest.raises(BadInput) as caught:
        load(toy, sealed=True)
    assert str(caught.value.problems[0]).startswith("protocol.sealed.yaml:")
    assert "field 'publish': appears twice" in str(caught.value.problems[0])


def test_a_key_given_twice_in_a_task_row_is_refused(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    """The same trick in JSON Lines: a second `oracle` in a row is what json keeps."""
    dataset = toy / "tasks" / "dataset.jsonl"
    lines = dataset.read_text().splitlines()
    lines[2] = lines[2][:-1] + ', "oracle": "oracles/toy-000.patch"}'
    dataset.write_text("\n".join(lines) + "\n")
    assert _seal_fails(cli, toy) == (
        "sealbench: tasks/dataset.jsonl:3: field 'oracle': appears twice in one object; JSON "
        "readers disagree on which copy counts (Python keeps the last): keep one")


@pytest.mark.parametrize(("name", "shown"), [(b"\xff\xfe.txt", "b'\\xff\\xfe.txt'"),
                                           (b"d\xe9j\xe0/app.txt", "b'd\\xe9j\\xe0/app.txt'")])
def test_a_fixture_file_name_that_is_not_utf8_is_refused_at_seal(cli, toy: Path, name: bytes,  # type: ignore[no-untyped-def]
                                                                 shown: str) -> None:
    """Attack (issue 22): a fixture file named in Latin-1 sealed, then every verify and run
    called the lock "altered": JSON cannot hold the name. Refused at seal, the name shown as
    its bytes, exit 2."""
    target = os.fsencode(toy / "fixtures" / "toy-001") + b"/" + name
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as handle:
        handle.write(b"x\n")
    assert _seal_fails(cli, toy) == (f"sealbench: tasks/dataset.jsonl:2: field 'repo': file "
                                     f"name {shown} is not valid UTF-8, which the lock (JSON) "
                                     "cannot record; rename it")
    assert not (toy / "protocol.lock").exists()


def test_a_fixture_symlink_to_a_name_that_is_not_utf8_is_refused(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    os.symlink(b"\xff", os.fsencode(toy / "fixtures" / "toy-002" / "link"))
    assert _seal_fails(cli, toy) == ("sealbench: tasks/dataset.jsonl:3: field 'repo': symlink "
                                     "'link' points to b'\\xff', which is not valid UTF-8; "
                                     "point it at a UTF-8 path")


def test_a_path_escaping_to_bytes_that_are_not_utf8_is_refused(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    """A JSON row can name undecodable bytes with a lone-surrogate escape ("\\udcff")."""
    dataset = toy / "tasks" / "dataset.jsonl"
    rows = _rows(dataset)
    rows[0]["oracle"] = "oracles/\udcff.patch"
    _write_rows(dataset, rows)
    with open(os.fsencode(toy / "oracles") + b"/\xff.patch", "wb") as handle:
        handle.write((toy / "oracles" / "toy-000.patch").read_bytes())
    assert _seal_fails(cli, toy) == ("sealbench: tasks/dataset.jsonl:1: field 'oracle': "
                                     "b'oracles/\\xff.patch' is not valid UTF-8, which the lock "
                                     "(JSON) cannot record; rename the file")


def test_a_utf8_file_name_seals_and_verifies(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    (toy / "fixtures" / "toy-001" / "café ☕.txt").write_text("x\n")
    assert cli("seal", toy).exit_code == 0
    verified = cli("verify", toy)
    assert verified.exit_code == 0, verified.stderr


def test_protocol_yaml_as_a_symlink_leading_out_is_refused(cli, toy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Attack (issue 22): protocol.yaml a symlink to a file outside the directory sealed, where
    every other such link is refused. Now it is too, naming it, exit 2, nothing written."""
    outside = tmp_path / "elsewhere.yaml"
    (toy / "protocol.yaml").rename(outside)
    (toy / "protocol.yaml").symlink_to(outside)
    assert _seal_fails(cli, toy) == (
        f"sealbench: protocol.yaml: is a symlink leading outside the protocol directory (to "
        f"{outside}); every path of a protocol must resolve inside it: put the file itself there")
    assert not (toy / "protocol.lock").exists()


def test_protocol_yaml_as_a_symlink_inside_the_directory_is_fine(toy: Path) -> None:
    """As for every other path: a link that resolves inside is followed."""
    (toy / "versions").mkdir()
    (toy / "protocol.yaml").rename(toy / "versions" / "v1.yaml")
    (toy / "protocol.yaml").symlink_to("versions/v1.yaml")
    assert load(toy).spec.protocol_id == "toy.v1"


def test_a_sealed_file_swapped_for_a_symlink_leading_out_is_refused(cli, toy: Path,  # type: ignore[no-untyped-def]
                                                                     tmp_path: Path) -> None:
    """Same bytes, so the lock's digest matches; the link itself is what verify refuses."""
    assert cli("seal", toy).exit_code == 0
    outside = tmp_path / "copy.sealed.yaml"
    (toy / "protocol.sealed.yaml").rename(outside)
    (toy / "protocol.sealed.yaml").symlink_to(outside)
    result = cli("verify", toy)
    assert result.exit_code == 3
    assert result.stderr.startswith(f"sealbench: protocol.sealed.yaml: is a symlink leading "
                                    f"outside the protocol directory (to {outside});")
    assert result.stderr.count("\n") == 1


def test_yaml_line_map_points_at_keys_and_items() -> None:
    lines = yaml_line_map("a:\n  b: 1\n  c:\n    - x\n    - y\n")
    assert lines[("a", "b")] == 2
    assert lines[("a", "c", 1)] == 5


@pytest.mark.parametrize(("names", "message"), [
    ('["OPENAI-KEY"]', "'OPENAI-KEY' is not an environment variable name"),
    ('["1ABC"]', "'1ABC' is not an environment variable name"),
    ('["HOME"]', "'HOME' is set by sealbench itself and cannot be passed through"),
    ('["SEALBENCH_TASK_ID"]', "'SEALBENCH_TASK_ID' is set by sealbench itself"),
    ('["A_KEY", "A_KEY"]', "lists 'A_KEY' twice"),
])
def test_solver_env_names_are_checked_with_their_line(cli, toy: Path, names: str,  # type: ignore[no-untyped-def]
                                                      message: str) -> None:
    text = (toy / "protocol.yaml").read_text() + f"  env: {names}\n"
    (toy / "protocol.yaml").write_text(text)
    line = len(text.splitlines())
    reported = _seal_fails(cli, toy)
    assert reported.startswith(f"sealbench: protocol.yaml:{line}: field 'solver.env.")
    assert message in reported and reported.count("\n") == 0


def test_solver_env_is_loaded_in_order(toy: Path) -> None:
    (toy / "protocol.yaml").write_text((toy / "protocol.yaml").read_text()
                                       + "  env: [OPENAI_API_KEY, _X1]\n")
    assert load(toy).spec.solver.env == ["OPENAI_API_KEY", "_X1"]


@pytest.mark.parametrize(("value", "message"), [
    (0, "input should be greater than 0"),
    (-5, "input should be greater than 0"),
    ("soon", "input should be a valid number"),
])
def test_task_timeout_must_be_a_positive_number(cli, toy: Path, value: object,  # type: ignore[no-untyped-def]
                                                message: str) -> None:
    dataset = toy / "tasks" / "dataset.jsonl"
    rows = _rows(dataset)
    rows[1]["timeout_sec"] = value
    _write_rows(dataset, rows)
    reported = _seal_fails(cli, toy)
    assert reported.startswith("sealbench: tasks/dataset.jsonl:2: field 'timeout_sec': ")
    assert message in reported


CEILING = "a time limit must be a finite number of seconds, at most 86400 (24 h)"


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "86400.5", "1.0e+9"])
@pytest.mark.parametrize(("section", "key"), [("budget", "timeout_sec"),
                                              ("verifier", "timeout_sec"),
                                              ("metric", "timeout_sec")])
def test_every_protocol_time_limit_is_finite_and_at_most_a_day(  # type: ignore[no-untyped-def]
        cli, toy: Path, section: str, key: str, value: str) -> None:
    """Attack (issue 22): `budget.timeout_sec: .inf` sealed, and a sleeping solver was never
    killed. Every time limit is refused past the ceiling, NaN and infinities too: one line
    naming file, line and field, exit 2."""
    path = toy / "protocol.yaml"
    text = path.read_text()
    if section == "budget":
        text = text.replace("  timeout_sec: 20\n", f"  timeout_sec: {value}\n")
    elif section == "metric":
        text = text.replace("  module: ./metric.py\n", f"  module: ./metric.py\n  {key}: {value}\n")
    else:
        text += f"verifier:\n  command: python -m pytest {{tests}}\n  {key}: {value}\n"
    path.write_text(text)
    line = next(number for number, written in enumerate(text.splitlines(), start=1)
                if written == f"  {key}: {value}" and _section_of(text, number) == section)
    message = _seal_fails(cli, toy)
    shown = {".inf": "inf", "-.inf": "-inf", ".nan": "nan", "86400.5": "86400.5",
             "1.0e+9": "1e+09"}[value]
    assert message == (f"sealbench: protocol.yaml:{line}: field '{section}.{key}': is {shown}; "
                       f"{CEILING}")


def _section_of(text: str, number: int) -> str:
    """The top-level key whose block holds line `number` (1-based)."""
    return next(line for line in reversed(text.splitlines()[:number])
                if line and not line.startswith((" ", "#"))).rstrip(":")


def test_a_day_is_the_ceiling_itself(toy: Path) -> None:
    path = toy / "protocol.yaml"
    path.write_text(path.read_text().replace("  timeout_sec: 20\n", "  timeout_sec: 86400\n"))
    assert load(toy).spec.budget.timeout_sec == 86400


@pytest.mark.parametrize(("value", "shown"), [("Infinity", "inf"), ("NaN", "nan"),
                                              ("1e400", "inf"), ("86401", "86401")])
def test_a_task_timeout_is_finite_and_at_most_a_day(cli, toy: Path, value: str,  # type: ignore[no-untyped-def]
                                                    shown: str) -> None:
    """JSON as Python reads it takes `Infinity`, `NaN` and an overflowing `1e400` (inf)."""
    dataset = toy / "tasks" / "dataset.jsonl"
    lines = dataset.read_text().splitlines()
    lines[1] = lines[1][:-1] + f', "timeout_sec": {value}}}'
    dataset.write_text("\n".join(lines) + "\n")
    assert _seal_fails(cli, toy) == (f"sealbench: tasks/dataset.jsonl:2: field 'timeout_sec': "
                                     f"is {shown}; {CEILING}")


def test_task_timeout_is_kept_per_task(toy: Path) -> None:
    dataset = toy / "tasks" / "dataset.jsonl"
    rows = _rows(dataset)
    rows[1]["timeout_sec"] = 1.5
    _write_rows(dataset, rows)
    timeouts = {t.id: t.timeout_sec for t in load(toy).dataset}
    assert timeouts == {"toy-000": None, "toy-001": 1.5, "toy-002": None, "toy-003": None}
@pytest.mark.parametrize(("written", "policy", "canonical"), [
    ("false", "none", False), ("no", "none", False), ("none", "none", False),
    ("true", "open", True), ("open", "open", True),
    ("model-api", "model-api", "model-api"),
])
def test_network_policy_names_and_the_booleans_they_replace(
        written: str, policy: str, canonical: bool | str) -> None:
    """`false`/`true` stay accepted; `none` and `open` hash as the booleans they were, so a
    protocol sealed before the names existed keeps its identity (tests/test_sealing.py's
    golden lock checks the whole of it)."""
    budget = Budget.model_validate(yaml.safe_load(f"timeout_sec: 5\nnetwork: {written}\n"))
    assert budget.network == policy
    assert budget.model_dump(mode="json")["network"] == canonical


def test_network_policy_typo_is_located(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    path = toy / "protocol.yaml"
    text = path.read_text().replace("max_files_touched: 3", "max_files_touched: 3\n"
                                    "  network: model_api")
    path.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "model_api" in s)
    message = _seal_fails(cli, toy)
    assert message == (f"sealbench: protocol.yaml:{line}: field 'budget.network': must be none, "
                       "model-api or open (false and true mean none and open), not 'model_api'")


@pytest.mark.parametrize("task_file", ["dataset.jsonl", "null.jsonl"])
def test_a_line_that_is_not_utf8_is_refused_naming_file_and_line(
        cli, toy: Path, task_file: str) -> None:  # type: ignore[no-untyped-def]
    """Replaced bytes would reach the prompt silently (issue 12 item 6)."""
    path = toy / "tasks" / task_file
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b".", b"\xe9.", 1)  # Latin-1, not UTF-8
    path.write_bytes(b"\n".join(lines))
    message = _seal_fails(cli, toy)
    assert (f"tasks/{task_file}:2: is not valid UTF-8 (JSON Lines must be); re-encode the "
            "file") in message


@pytest.mark.parametrize("where", ["toy-001", "NP-STUB-01"])
def test_a_git_file_in_a_fixture_is_refused_naming_it(cli, toy: Path, where: str) -> None:  # type: ignore[no-untyped-def]
    """A vendored submodule's `.git` file points outside the fixture (issue 12 item 6)."""
    (toy / "fixtures" / where / "vendor").mkdir()
    (toy / "fixtures" / where / "vendor" / ".git").write_text("gitdir: ../../.git/modules/v\n")
    message = _seal_fails(cli, toy)
    assert "'vendor/.git' is a .git file" in message and "Traceback" not in message
    assert len([line for line in message.splitlines()
                if not line.startswith("  ")]) == 1
