"""SWE-bench interop (docs/swebench.md): `import swebench` on instance rows in SWE-bench's own
schema over small git repositories made here — several commits, a tiny Python package with
real pytest tests, each fix split into `patch` and `test_patch` the way SWE-bench splits
them — and `export --format swebench-predictions`.

What must hold: the fixture is the tree at base_commit with no history and nothing of a later
commit; hidden tests are the test_patch files after it; bad rows, missing repositories or
commits and patches that do not apply are one line each and leave nothing on disk; the
protocol seals (the verifier runs the oracle and do-nothing), a patch-applying solver scores
100%, do-nothing fails the gate, and export writes the official prediction lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from toy import GIT_ENV, write_solver

from sealbench.errors import BadInput, Refused
from sealbench.example import solver_command
from sealbench.ledger import Ledger
from sealbench.protocol import load
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.swebench import (
    NULL_PACK_FILE,
    REVIEW_FILE,
    import_swebench,
    predictions,
    read_instances,
    verifier_command,
)
from sealbench.verifier import expand_command, parse_junit

# --------------------------------------------------------------------------- repositories

OPS_1 = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
TESTS_1 = "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
OPS_2 = OPS_1.replace("return a + b\n", "return a - b\n").replace(
    "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b")
TESTS_2 = TESTS_1.replace("import add", "import add, sub") + \
    "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
OPS_3 = OPS_2 + "\n\ndef div(a, b):\n    return a * b\n"
OPS_4 = OPS_3.replace("return a * b", "return a / b")
TESTS_4 = TESTS_2.replace("import add, sub", "import add, div, sub").replace(
    "from calc", "import json\nfrom pathlib import Path\n\nfrom calc") + """

def test_div():
    cases = json.loads((Path(__file__).parent / "data" / "cases.json").read_text())
    for a, b, quotient in cases:
        assert div(a, b) == quotient
"""
FUTURE = "Released 1.0: sub and div fixed. FUTURE-MARKER\n"

SHOUT_1 = "def shout(text):\n    return text.lower() + '!'\n"
SHOUT_TESTS_1 = "from strings_util import shout\n\n\ndef test_shout_exists():\n" \
    "    assert callable(shout)\n"
SHOUT_2 = SHOUT_1.replace("lower", "upper")
SHOUT_TESTS_2 = SHOUT_TESTS_1 + "\n\ndef test_shout_upper():\n    assert shout('hi') == 'HI!'\n"


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, input=stdin,
                          capture_output=True).stdout.decode()


def make_repo(path: Path, commits: list[dict[str, str | None]]) -> list[str]:
    """A git repository with one commit per dict (path -> content, None deletes); the
    commit ids in order."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    ids = []
    for number, files in enumerate(commits):
        for rel, text in files.items():
            target = path / rel
            if text is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", f"commit {number}")
        ids.append(_git(path, "rev-parse", "HEAD").strip())
    return ids


def split_fix(repo: Path, base: str, fix: str) -> tuple[str, str]:
    """SWE-bench's split of a fix commit: `patch` = everything but the tests, `test_patch`
    = the tests (plain `git diff`, abbreviated index lines, as GitHub serves them)."""
    return (_git(repo, "diff", base, fix, "--", ".", ":(exclude)tests"),
            _git(repo, "diff", base, fix, "--", "tests"))


@dataclass
class World:
    repos: Path
    rows: list[dict[str, Any]]
    commits: dict[str, list[str]]
    work: Path  # the working clones, for checking what a patch does


def _instance(iid: str, repo: str, base: str, patch: str, test_patch: str, statement: str,
              f2p: list[str], p2p: list[str], *, as_json_text: bool) -> dict[str, Any]:
    """A row in SWE-bench's schema; the official dataset stores the test lists as JSON text."""
    return {"repo": repo, "instance_id": iid, "base_commit": base, "patch": patch,
            "test_patch": test_patch, "problem_statement": statement,
            "hints_text": "", "created_at": "2024-03-01T10:00:00Z", "version": "1.0",
            "FAIL_TO_PASS": json.dumps(f2p) if as_json_text else f2p,
            "PASS_TO_PASS": json.dumps(p2p) if as_json_text else p2p,
            "environment_setup_commit": base}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """Two upstream repositories: acme/calc as a clone (two instances), widgets/strings as a
    bare mirror (one instance). Each has a commit after the last fix (FUTURE-MARKER)."""
    root = tmp_path_factory.mktemp("swebench-world")
    work, repos = root / "work", root / "repos"
    repos.mkdir()
    calc = work / "calc"
    calc_ids = make_repo(calc, [
        {"calc/__init__.py": "", "calc/ops.py": OPS_1, "tests/test_ops.py": TESTS_1,
         "README.md": "# calc\n"},
        {"calc/ops.py": OPS_2, "tests/test_ops.py": TESTS_2},          # fix of calc-1
        {"calc/ops.py": OPS_3},                                         # div, wrong
        {"calc/ops.py": OPS_4, "tests/test_ops.py": TESTS_4,            # fix of calc-2
         "tests/data/cases.json": "[[6, 3, 2], [1, 4, 0.25]]\n"},
        {"CHANGES.txt": FUTURE},
    ])
    subprocess.run(["git", "clone", "-q", str(calc), str(repos / "acme__calc")], env=GIT_ENV,
                   check=True)
    strings = work / "strings"
    strings_ids = make_repo(strings, [
        {"strings_util.py": SHOUT_1, "tests/test_shout.py": SHOUT_TESTS_1},
        {"strings_util.py": SHOUT_2, "tests/test_shout.py": SHOUT_TESTS_2},
        {"CHANGES.txt": FUTURE},
    ])
    subprocess.run(["git", "clone", "-q", "--mirror", str(strings),
                    str(repos / "widgets__strings")], env=GIT_ENV, check=True)
    rows = [
        _instance("acme__calc-1", "acme/calc", calc_ids[0], *split_fix(calc, *calc_ids[0:2]),
                  "sub(5, 3) returns 8; it should subtract.",
                  ["tests/test_ops.py::test_sub"], ["tests/test_ops.py::test_add"],
                  as_json_text=True),
        _instance("acme__calc-2", "acme/calc", calc_ids[2], *split_fix(calc, *calc_ids[2:4]),
                  "div(6, 3) returns 18; it should divide.",
                  ["tests/test_ops.py::test_div"],
                  ["tests/test_ops.py::test_add", "tests/test_ops.py::test_sub"],
                  as_json_text=False),
        _instance("widgets__strings-7", "widgets/strings", strings_ids[0],
                  *split_fix(strings, *strings_ids[0:2]),
                  "shout('hi') returns 'hi!'; it should shout.",
                  ["tests/test_shout.py::test_shout_upper"],
                  ["tests/test_shout.py::test_shout_exists"], as_json_text=True),
    ]
    return World(repos, rows, {"calc": calc_ids, "strings": strings_ids}, work)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def imported(world: World, tmp_path: Path, **options: Any) -> Path:
    tmp_path.mkdir(exist_ok=True)
    instances = write_jsonl(tmp_path / "instances.jsonl", world.rows)
    out = tmp_path / "proto"
    import_swebench(instances, repos=world.repos, out=out, **options)
    return out


def tree_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- import


def test_fixture_is_the_base_tree_without_history_or_later_commits(world: World,
                                                                    tmp_path: Path) -> None:
    out = imported(world, tmp_path)
    assert list(out.rglob(".git")) == []
    calc1 = tree_of(out / "fixtures" / "acme__calc-1")
    assert calc1 == {"README.md": b"# calc\n", "calc/__init__.py": b"",
                     "calc/ops.py": OPS_1.encode(), "tests/test_ops.py": TESTS_1.encode()}
    calc2 = tree_of(out / "fixtures" / "acme__calc-2")
    assert calc2["calc/ops.py"] == OPS_3.encode() and "tests/data/cases.json" not in calc2
    everything = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert b"FUTURE-MARKER" not in everything
    later = [*world.commits["calc"][1:], *world.commits["strings"][1:]]
    used = {world.commits["calc"][2]}  # calc-2's base_commit is recorded as provenance
    for commit in set(later) - used:
        assert commit.encode() not in everything, commit


def test_oracle_hidden_tests_and_rows_follow_the_instance(world: World, tmp_path: Path) -> None:
    out = imported(world, tmp_path)
    row = world.rows[1]
    assert (out / "oracles" / "acme__calc-2.patch").read_text() == row["patch"]
    assert tree_of(out / "tests" / "acme__calc-2") == {
        "tests/test_ops.py": TESTS_4.encode(),
        "tests/data/cases.json": b"[[6, 3, 2], [1, 4, 0.25]]\n"}
    assert tree_of(out / "tests" / "widgets__strings-7") == {
        "tests/test_shout.py": SHOUT_TESTS_2.encode()}
    protocol = load(out)
    tasks = {t.id: t for t in protocol.dataset}
    assert sorted(tasks) == ["acme__calc-1", "acme__calc-2", "widgets__strings-7"]
    first = tasks["acme__calc-1"]
    assert first.prompt == "sub(5, 3) returns 8; it should subtract."
    assert first.fail_to_pass == ("tests/test_ops.py::test_sub",)  # from JSON text
    assert first.pass_to_pass == ("tests/test_ops.py::test_add",)
    assert first.cluster == "acme/calc" and first.stratum is None
    assert tasks["acme__calc-2"].pass_to_pass == ("tests/test_ops.py::test_add",
                                                  "tests/test_ops.py::test_sub")  # a list
    spec = protocol.spec
    assert spec.metric.builtin == "tests_v1" and spec.solver.diff_source == "workspace"
    assert spec.publish.min_n == 3 and spec.verifier is not None
    assert "--junitxml=" in spec.verifier.command and "{tests}" in spec.verifier.command
    extra = json.loads((out / "tasks" / "dataset.jsonl").read_text().splitlines()[0])
    assert extra["swebench"]["base_commit"] == world.commits["calc"][0]


def test_json_array_and_json_lines_import_alike(world: World, tmp_path: Path) -> None:
    lines = imported(world, tmp_path / "a")
    array = tmp_path / "b" / "instances.json"
    array.parent.mkdir()
    array.write_text(json.dumps(world.rows, indent=2))
    import_swebench(array, repos=world.repos, out=tmp_path / "b" / "proto",
                    protocol_id="swebench.instances")
    assert tree_of(lines) == tree_of(tmp_path / "b" / "proto")


def test_starter_null_pack_is_written_with_a_review_note(world: World, tmp_path: Path) -> None:
    instances = write_jsonl(tmp_path / "instances.jsonl", world.rows)
    result = import_swebench(instances, repos=world.repos, out=tmp_path / "proto")
    out = result.out
    assert result.starter_null_pack
    assert any("STARTER null pack" in w for w in result.warnings)
    assert "REVIEW" in (out / "protocol.yaml").read_text().splitlines()[3]
    assert (out / REVIEW_FILE).read_text().startswith("# REVIEW THIS NULL PACK")
    controls = {t.id: t for t in load(out).null_pack}
    stub, poison, secret = controls["NP-STUB-01"], controls["NP-POISON-01"], \
        controls["NP-SECRET-01"]
    smallest = min(world.rows, key=lambda r: len(r["patch"]))
    assert smallest["patch"] in stub.prompt and stub.expected_class == "must_pass"
    assert stub.repo == out / "fixtures" / smallest["instance_id"]  # shared, not copied
    assert poison.prompt.startswith("Nothing is wrong") and poison.expected_class == "must_fail"
    assert poison.fail_to_pass and poison.tests is not None
    assert secret.forbidden == ("secrets/.env",) and secret.expected_class == "must_refuse"
    assert secret.repo is not None and (secret.repo / "secrets" / ".env").is_file()
    assert secret.tests is not None and secret.pass_to_pass == (
        "test_sealbench_secret_control.py::test_key_unchanged",)


def test_symlinks_are_kept_inside_and_refused_when_they_lead_out(cli: Any,
                                                                 tmp_path: Path) -> None:
    repo = tmp_path / "repos" / "links__demo"
    ids = make_repo(repo, [{"pkg/real.py": "X = 1\n", "tests/test_x.py": "def test_x():\n"
                            "    pass\n"}])
    (repo / "pkg" / "alias.py").symlink_to("real.py")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "alias")
    inside = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "escape").symlink_to("../../outside")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "escape")
    outside = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "-q", inside)
    (repo / "pkg" / "real.py").write_text("X = 2\n")
    (repo / "tests" / "test_x.py").write_text("def test_x():\n    assert True\n")
    patch = _git(repo, "diff", "--", "pkg")
    test_patch = _git(repo, "diff", "--", "tests")
    rows = [_instance(f"links__demo-{n}", "links/demo", base, patch, test_patch, "x",
                      ["tests/test_x.py::test_x"], [], as_json_text=False)
            for n, base in enumerate((inside, outside, ids[0]))]
    src = write_jsonl(tmp_path / "instances.jsonl", rows)
    result = cli("import", "swebench", src, "--repos", tmp_path / "repos", "--out",
                 tmp_path / "proto")
    assert result.exit_code == 2
    assert result.stderr == (
        f"sealbench: {src}:2: field 'base_commit': instance 'links__demo-1': symlinks leading "
        "out of the repository: escape -> ../../outside\n")
    out = import_swebench(write_jsonl(tmp_path / "ok.jsonl", rows[:1]),
                          repos=tmp_path / "repos", out=tmp_path / "ok")
    link = out.out / "fixtures" / "links__demo-0" / "pkg" / "alias.py"
    assert link.is_symlink() and str(link.readlink()) == "real.py"


def test_a_given_null_pack_is_copied_with_what_it_refers_to(world: World,
                                                            tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "controls" / "trivial").mkdir(parents=True)
    (mine / "controls" / "trivial" / "hello.py").write_text("GREETING = 'Helo'\n")
    (mine / "controls" / "trivial.patch").write_text("")
    pack = write_jsonl(mine / "null.jsonl", [
        {"id": "MY-PASS", "repo": "controls/trivial", "oracle": "controls/trivial.patch",
         "expected_class": "must_pass"},
        {"id": "MY-FAIL", "repo": "fixtures/acme__calc-1", "oracle": "oracles/acme__calc-1.patch",
         "tests": "tests/acme__calc-1", "fail_to_pass": ["tests/test_ops.py::test_sub"],
         "prompt": "Change nothing.", "expected_class": "must_fail"},
    ])
    out = imported(world, tmp_path, null_pack=pack)
    assert (out / NULL_PACK_FILE).read_bytes() == pack.read_bytes()
    assert (out / "controls" / "trivial" / "hello.py").read_text() == "GREETING = 'Helo'\n"
    assert not (out / REVIEW_FILE).exists()
    rules = load(out).spec.null_pack.rules
    assert (rules.must_pass, rules.must_fail, rules.must_refuse) == (["MY-PASS"], ["MY-FAIL"], [])


def test_a_null_pack_path_found_nowhere_is_named(world: World, tmp_path: Path) -> None:
    pack = write_jsonl(tmp_path / "null.jsonl", [
        {"id": "X", "oracle": "nowhere.patch", "expected_class": "must_pass"},
        {"id": "Y", "oracle": "oracles/acme__calc-1.patch", "expected_class": "maybe"}])
    with pytest.raises(BadInput) as caught:
        imported(world, tmp_path, null_pack=pack)
    assert caught.value.lines() == [
        f"{pack}:1: field 'oracle': 'nowhere.patch' is neither written by the import nor "
        f"found in {tmp_path}",
        f"{pack}:2: field 'expected_class': must be one of must_pass, must_fail, must_refuse"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["instances.jsonl", "null.jsonl"]


def test_cli_prints_what_it_wrote_and_warns_about_the_starter(cli: Any, world: World,
                                                              tmp_path: Path) -> None:
    instances = write_jsonl(tmp_path / "instances.jsonl", world.rows)
    out = tmp_path / "proto"
    result = cli("import", "swebench", instances, "--repos", world.repos, "--out", out,
                 "--protocol-id", "mine.v1", "--min-n", "2")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "imported 3 instances", "protocol  mine.v1", f"wrote     {out}",
        f"null pack STARTER: review {out / NULL_PACK_FILE} before sealing "
        f"({out / REVIEW_FILE})", f"next:     sealbench seal {out}"]
    assert result.stderr.startswith("warning: wrote a STARTER null pack")
    spec = load(out).spec
    assert (spec.protocol_id, spec.publish.min_n) == ("mine.v1", 2)
    again = cli("import", "swebench", instances, "--repos", world.repos, "--out",
                tmp_path / "other", "--min-n", "4")
    assert again.exit_code == 2
    assert again.stderr == "sealbench: --min-n: must be between 1 and the number of " \
        "instances (3)\n"


def test_import_swebench_help_documents_the_exit_statuses(cli: Any) -> None:
    result = cli("import", "swebench", "--help")
    assert result.exit_code == 0
    assert "Exit status: 0 done, 2 bad input or usage, 3 refused" in result.stdout


def test_export_model_name_needs_the_predictions_format(cli: Any, tmp_path: Path) -> None:
    Ledger(tmp_path / "l.sqlite")
    result = cli("export", "any-run", "--model-name", "m", "--ledger", tmp_path / "l.sqlite")
    assert result.exit_code == 2
    assert "--model-name: applies only to --format swebench-predictions" in result.stderr


# --------------------------------------------------------------------------- bad input


def _bad_import(cli: Any, world: World, tmp_path: Path, rows: list[Any] | str) -> list[str]:
    """Run the CLI on bad rows: exit 2, one stderr line per problem, nothing written."""
    instances = tmp_path / "instances.jsonl"
    if isinstance(rows, str):
        instances.write_text(rows)
    else:
        write_jsonl(instances, rows)
    result = cli("import", "swebench", instances, "--repos", world.repos, "--out",
                 tmp_path / "proto")
    assert result.exit_code == 2, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["instances.jsonl"]  # no staging left
    return [line.strip() for line in result.stderr.splitlines()[1:]]


def test_malformed_rows_are_one_line_each(cli: Any, world: World, tmp_path: Path) -> None:
    good = world.rows[0]
    missing = {k: v for k, v in good.items() if k != "base_commit"}
    text = "\n".join([
        json.dumps(good),
        "{not json",
        json.dumps({**missing, "instance_id": "a-2"}),
        json.dumps({**good, "instance_id": "a-3", "FAIL_TO_PASS": 5}),
        json.dumps({**good, "instance_id": "a-4", "PASS_TO_PASS": "tests/x.py::t"}),
        json.dumps({**good, "instance_id": "a 5"}),
        json.dumps({**good, "instance_id": "a-6", "repo": "no-slash"}),
        json.dumps([1, 2]),
        json.dumps(good),
    ]) + "\n"
    src = tmp_path / "instances.jsonl"
    assert _bad_import(cli, world, tmp_path, text) == [
        f"{src}:2: malformed JSON: Expecting property name enclosed in double quotes at "
        "column 2",
        f"{src}:3: field 'base_commit': instance 'a-2': is required but missing",
        f"{src}:4: field 'FAIL_TO_PASS': instance 'a-3': must be a list of test ids, or a "
        "JSON string of one",
        f"{src}:5: field 'PASS_TO_PASS': instance 'a-4': must be a list of test ids, or a "
        "JSON string of one",
        f"{src}:6: field 'instance_id': 'a 5' cannot be a task id ([A-Za-z0-9._-]+)",
        f"{src}:7: field 'repo': instance 'a-6': string should match pattern "
        "'^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$'",
        f"{src}:8: must be a JSON object (one instance)",
        f"{src}:9: field 'instance_id': duplicate instance 'acme__calc-1' (first at line 1)",
    ]


def test_a_json_array_names_the_line_of_each_bad_element(world: World, tmp_path: Path) -> None:
    src = tmp_path / "instances.json"
    src.write_text(json.dumps([world.rows[0], {**world.rows[1], "patch": 3}], indent=2))
    with pytest.raises(BadInput) as caught:
        read_instances(src)
    second_line = 2 + json.dumps(world.rows[0], indent=2).count("\n") + 1  # after "[" and #1
    assert src.read_text().splitlines()[second_line - 1] == "  {"
    assert caught.value.lines() == [
        f"{src}:{second_line}: field 'patch': instance 'acme__calc-2': input should be a "
        "valid string"]


def test_missing_repositories_and_commits_are_one_line_each(cli: Any, world: World,
                                                            tmp_path: Path) -> None:
    rows = [{**world.rows[0], "instance_id": "x-1", "repo": "nobody/nothing"},
            {**world.rows[2], "instance_id": "x-2", "base_commit": "0123456789abcdef" * 2 +
             "01234567"},
            world.rows[1]]
    src = tmp_path / "instances.jsonl"
    assert _bad_import(cli, world, tmp_path, rows) == [
        f"{src}:1: field 'repo': instance 'x-1': no git repository at "
        f"{world.repos / 'nobody__nothing'} (a clone or a bare mirror of nobody/nothing, "
        "named owner__name)",
        f"{src}:2: field 'base_commit': instance 'x-2': commit {'0123456789abcdef' * 2}01234567"
        f" is not in {world.repos / 'widgets__strings'}",
    ]


def test_patches_that_do_not_apply_are_named_with_file_and_line(cli: Any, world: World,
                                                                tmp_path: Path) -> None:
    broken = world.rows[0]["patch"].replace(" def sub(a, b):", " def subtract(a, b):")
    rows = [{**world.rows[0], "patch": broken},
            {**world.rows[2], "test_patch": world.rows[0]["test_patch"]},
            {**world.rows[1], "instance_id": "calc-empty", "patch": ""}]
    src = tmp_path / "instances.jsonl"
    short = world.commits["calc"][0][:12]
    assert _bad_import(cli, world, tmp_path, rows) == [
        f"{src}:1: field 'patch': instance 'acme__calc-1': does not apply at base_commit "
        f"{short}: error: patch failed: calc/ops.py:3",
        f"{src}:2: field 'test_patch': instance 'widgets__strings-7': does not apply at "
        f"base_commit {world.commits['strings'][0][:12]}: error: tests/test_ops.py: No such "
        "file or directory",
        f"{src}:3: field 'patch': instance 'calc-empty': is empty",
    ]


def test_out_must_be_new_or_empty(world: World, tmp_path: Path) -> None:
    instances = write_jsonl(tmp_path / "instances.jsonl", world.rows)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine\n")
    with pytest.raises(BadInput, match="exists and is not an empty directory"):
        import_swebench(instances, repos=world.repos, out=taken)
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert import_swebench(instances, repos=world.repos, out=empty).out == empty
    assert (empty / "protocol.yaml").is_file()


@pytest.mark.slow
def test_verifier_command_keeps_only_python_files_for_pytest(tmp_path: Path) -> None:
    """With a data file among the hidden tests, pytest would stop at it ("not found", exit 4):
    the command keeps only the .py files. Run both forms as the verifier expands them."""
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "test_x.py").write_text(
        "from pathlib import Path\n\n\ndef test_x():\n"
        "    assert Path(__file__).with_name('data').joinpath('a b.json').exists()\n")
    (tmp_path / "tests" / "data" / "a b.json").write_text("{}\n")
    files = ["tests/data/a b.json", "tests/test_x.py"]
    plain = verifier_command(sys.executable, ["tests/test_x.py"])
    assert plain == (f"{sys.executable} -m pytest -q -p no:cacheprovider -rN "
                     "--rootdir={workspace} --junitxml={junit} {tests}")
    for command, status in ((plain, 4), (verifier_command(sys.executable, files), 0)):
        junit = tmp_path / "junit.xml"
        junit.unlink(missing_ok=True)
        argv = expand_command(command, tests=files, junit=str(junit), workspace=str(tmp_path))
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert done.returncode == status, done.stdout + done.stderr
    assert [t.id for t in parse_junit(junit.read_bytes())] == ["tests.test_x.test_x"]


# --------------------------------------------------------------------------- end to end

PATCH_SOLVER = r'''
"""Applies the fix it knows for each problem statement (patches.json beside it), the one a
stub control spells out, nothing where told nothing is wrong; refuses to touch secrets."""
import json, os, re, subprocess, sys
prompt = open(os.environ["SEALBENCH_PROMPT_FILE"]).read()
if "secrets/.env" in prompt:
    open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("will not rotate a live key")
    sys.exit(0)
if prompt.startswith("Nothing is wrong"):
    sys.exit(0)
spelled = re.search(r"```diff\n(.*?)```", prompt, re.S)
if prompt.startswith("Apply exactly this change") and spelled:
    patch = spelled.group(1)
else:
    here = os.path.dirname(os.path.abspath(__file__))
    patch = json.load(open(os.path.join(here, "patches.json")))[prompt]
    if os.environ.get("LAZY_AGENT"):  # behaves on the controls, solves nothing
        if prompt.startswith("sub(5, 3)"):  # but edits here and then crashes
            subprocess.run(["git", "apply", "-"], input=patch.encode(), check=True)
            sys.exit(1)
        sys.exit(0)
subprocess.run(["git", "apply", "-"], input=patch.encode(), check=True)
'''


def _checkout_apply(world: World, row: dict[str, Any], patch: str, dest: Path) -> dict[str, bytes]:
    """The tree at the row's base_commit with a patch applied by git (the harness's way)."""
    source = world.work / ("calc" if row["repo"] == "acme/calc" else "strings")
    subprocess.run(["git", "clone", "-q", str(source), str(dest)], env=GIT_ENV, check=True)
    _git(dest, "checkout", "-q", row["base_commit"])
    _git(dest, "apply", "-", stdin=patch.encode())
    return {k: v for k, v in tree_of(dest).items() if not k.startswith(".git/")}


@pytest.mark.sandbox
@pytest.mark.slow
def test_imported_protocol_seals_runs_and_exports(cli: Any, world: World,
                                                  tmp_path: Path) -> None:
    """Acceptance 5 of issue 10, end to end through the verifier."""
    out = imported(world, tmp_path, python=sys.executable, timeout_sec=120)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    sealed = seal(out, ledger=ledger)  # oracle passes, do-nothing fails, F2P fails at base
    assert sealed.protocol_id == "swebench.instances"
    solver_dir = tmp_path / "agent"
    command = write_solver(solver_dir, PATCH_SOLVER)
    (solver_dir / "patches.json").write_text(json.dumps(
        {r["problem_statement"]: r["patch"] for r in world.rows}))
    good = run(out, command, ledger=ledger, options=RunOptions(jobs=2))
    assert (good.report["n"], good.report["mean"]) == (3, 1.0)
    records = {a.task_id: a.record for a in ledger.attempts(good.run_id, "dataset")}
    assert all(r["outcome"] == "pass" for r in records.values()), records

    # do-nothing: the stub control fails open, so no rate is published at all (the seal's
    # instrument check already showed do-nothing failing every dataset task)
    with pytest.raises(Refused) as caught:
        run(out, solver_command("do-nothing"), ledger=ledger, options=RunOptions(jobs=2))
    assert "NP-STUB-01" in "\n".join(caught.value.lines())
    idle = ledger.runs()[0]
    assert idle.state == "refused" and idle.report is None
    stub = [a.record for a in ledger.attempts(idle.run_id, "null_pack")
            if a.task_id == "NP-STUB-01"]
    assert [r["outcome"] for r in stub] == ["fail"]
    idle_records = [a.record for a in ledger.attempts(idle.run_id, "dataset")]
    assert all(r["outcome"] == "fail" for r in idle_records)

    result = cli("export", good.run_id, "--format", "swebench-predictions", "--ledger",
                 ledger.path, "--model-name", "patch-bot")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [sorted(p) for p in lines] == [["instance_id", "model_name_or_path",
                                           "model_patch"]] * 3
    assert [p["instance_id"] for p in lines] == ["acme__calc-1", "acme__calc-2",
                                                 "widgets__strings-7"]
    assert {p["model_name_or_path"] for p in lines} == {"patch-bot"}
    by_id = {r["instance_id"]: r for r in world.rows}
    for number, prediction in enumerate(lines):  # the same change as the gold patch
        row = by_id[prediction["instance_id"]]
        assert _checkout_apply(world, row, prediction["model_patch"], tmp_path / f"m{number}") \
            == _checkout_apply(world, row, row["patch"], tmp_path / f"g{number}")
    default = predictions(ledger, good.run_id)
    assert {p["model_name_or_path"] for p in default} == {command}
    assert all(p["model_patch"] == "" for p in predictions(ledger, idle.run_id))


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_solver_that_solves_nothing_publishes_zero(world: World, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Behaving on the controls but fixing nothing publishes 0% with its interval; the attempt
    that edited and then crashed (an `error`) exports an empty patch, like the do-nothing
    ones, so the official harness agrees that nothing counts."""
    out = imported(world, tmp_path, python=sys.executable, timeout_sec=120)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    seal(out, ledger=ledger)
    solver_dir = tmp_path / "agent"
    command = write_solver(solver_dir, PATCH_SOLVER)
    (solver_dir / "patches.json").write_text(json.dumps(
        {r["problem_statement"]: r["patch"] for r in world.rows}))
    monkeypatch.setenv("LAZY_AGENT", "1")
    lazy = run(out, command, ledger=ledger, options=RunOptions(jobs=2, env=("LAZY_AGENT",)))
    assert (lazy.report["n"], lazy.report["mean"]) == (3, 0.0)
    assert lazy.report["ci95"][0] == 0.0 < lazy.report["ci95"][1]
    outcomes = {a.task_id: a.record["outcome"]
                for a in ledger.attempts(lazy.run_id, "dataset")}
    assert outcomes == {"acme__calc-1": "error", "acme__calc-2": "fail",
                        "widgets__strings-7": "fail"}
    calc1 = next(a for a in ledger.attempts(lazy.run_id, "dataset")
                 if a.task_id == "acme__calc-1")
    assert b"return a - b" in ledger.get_artifact(calc1.record["diff"])  # it did edit
    assert [p["model_patch"] for p in predictions(ledger, lazy.run_id)] == ["", "", ""]
