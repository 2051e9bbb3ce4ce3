"""Sealing, identity and verification (docs/sealing.md; issue 2 items 3, 4, 8)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from toy import write_solver

from sealbench.errors import Refused
from sealbench.ledger import Ledger
from sealbench.sealing import Lock, hash_file, lock_text, seal, verify

DATA = Path(__file__).parent / "data"
GOLDEN_LOCK = DATA / "golden_protocol.lock"


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_seal_writes_sealed_yaml_lock_and_ledger_entry(toy: Path, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite")
    result = seal(toy, ledger=ledger)
    sealed_text = (toy / "protocol.sealed.yaml").read_text()
    assert "PENDING_SEAL" not in sealed_text
    lock = Lock.model_validate_json((toy / "protocol.lock").read_bytes())
    digests = {f.path: f.sha256 for f in lock.files}
    assert f'sha256: "{digests["tasks/dataset.jsonl"]}"' in sealed_text
    assert f'sha256: "{digests["metric.py"]}"' in sealed_text
    # comments and layout of the user's file survive: only the digests changed
    original = (toy / "protocol.yaml").read_text().splitlines()
    assert len(sealed_text.splitlines()) == len(original)
    roles = {f.role for f in lock.files}
    assert roles == {"dataset", "null_pack", "metric", "oracle", "fixture"}
    assert ledger.protocol_identity("toy.v1") == result.identity == lock.identity


def test_manifest_hashes_match_sha256sum_semantics(toy: Path) -> None:
    import hashlib

    path = toy / "metric.py"
    digest, size, mode = hash_file(path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (size, mode) == (path.stat().st_size, "100644")


def test_golden_lock_format(tmp_path: Path) -> None:
    """A silent change to protocol.lock or to the identity derivation fails here."""
    proto = tmp_path / "golden_protocol"
    shutil.copytree(DATA / "golden_protocol", proto)
    seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    assert (proto / "protocol.lock").read_text() == GOLDEN_LOCK.read_text()


SEALED_KINDS = {
    "dataset": "tasks/dataset.jsonl",
    "null pack": "tasks/null.jsonl",
    "metric": "metric.py",
    "oracle": "oracles/toy-002.patch",
    "fixture": "fixtures/toy-001/app.txt",
    "control fixture": "fixtures/NP-SECRET-01/secrets/.env",
}


@pytest.mark.parametrize("kind", sorted(SEALED_KINDS))
def test_one_byte_tamper_is_named_by_verify_and_run(cli, toy: Path, toy_solver: str,  # type: ignore[no-untyped-def]
                                                    kind: str) -> None:
    assert cli("seal", toy).exit_code == 0
    assert cli("verify", toy).exit_code == 0
    rel = SEALED_KINDS[kind]
    _flip_one_byte(toy / rel)
    for args in (("verify", toy), ("run", toy, "--solver", toy_solver)):
        result = cli(*args)
        assert result.exit_code == 3, result.output
        assert f"{rel}: content changed since sealing" in result.stderr
        assert "Traceback" not in result.stderr


def test_tampered_sealed_yaml_and_new_fixture_file_are_named(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    sealed = toy / "protocol.sealed.yaml"
    sealed.write_text(sealed.read_text().replace("timeout_sec: 20", "timeout_sec: 21"))
    (toy / "fixtures" / "toy-000" / "extra.py").write_text("print('new')\n")
    result = cli("verify", toy)
    assert result.exit_code == 3
    assert "protocol.sealed.yaml: changed since sealing" in result.stderr
    assert "fixtures/toy-000/extra.py: not sealed" in result.stderr


def test_editing_protocol_yaml_after_sealing_is_refused(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    path = toy / "protocol.yaml"
    path.write_text(path.read_text().replace("timeout_sec: 20", "timeout_sec: 600"))
    result = cli("verify", toy)
    assert result.exit_code == 3
    assert "protocol.yaml: edited after sealing (changed: budget)" in result.stderr


def test_comment_edit_of_protocol_yaml_is_not_a_change(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    path = toy / "protocol.yaml"
    path.write_text("# a note added later\n" + path.read_text())
    assert cli("verify", toy).exit_code == 0


def test_unsealed_protocol_is_refused_by_verify_and_run(cli, toy: Path, toy_solver: str) -> None:  # type: ignore[no-untyped-def]
    for args in (("verify", toy), ("run", toy, "--solver", toy_solver)):
        result = cli(*args)
        assert result.exit_code == 3
        assert "protocol is not sealed" in result.stderr


def test_resealing_changed_protocol_under_same_id_is_refused(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    first = cli("seal", toy)
    assert first.exit_code == 0
    assert cli("seal", toy).exit_code == 0  # same content, same identity: idempotent
    path = toy / "protocol.yaml"
    path.write_text(path.read_text().replace("timeout_sec: 20", "timeout_sec: 30"))
    second = cli("seal", toy)
    assert second.exit_code == 3
    assert "protocol_id 'toy.v1' was sealed before" in second.stderr
    assert "needs a new protocol_id" in second.stderr
    # nothing was overwritten by the refused seal
    assert "timeout_sec: 20" in (toy / "protocol.sealed.yaml").read_text()
    path.write_text(path.read_text().replace("protocol_id: toy.v1", "protocol_id: toy.v2"))
    third = cli("seal", toy)
    assert third.exit_code == 0, third.stderr
    assert "sealed toy.v2" in third.output


def test_identity_covers_fixture_budget_and_publish(toy: Path, tmp_path: Path) -> None:
    identities = set()
    for i, change in enumerate([
        lambda: None,
        lambda: (toy / "fixtures/toy-000/app.txt").write_text("line one\ncolour 0 is bad!\n"),
        lambda: _replace(toy / "protocol.yaml", "max_files_touched: 3", "max_files_touched: 4"),
        lambda: _replace(toy / "protocol.yaml", "require_ci: true", "require_ci: false"),
    ]):
        change()
        if i == 1:  # keep the oracle applicable: regenerate it for the edited fixture
            continue
        identities.add(seal(toy, ledger=Ledger(tmp_path / f"l{i}.sqlite"),
                            check_instrument=False).identity)
    assert len(identities) == 3


def test_solver_env_is_sealed_and_an_empty_list_changes_no_identity(toy: Path,
                                                                    tmp_path: Path) -> None:
    """`solver.env` is part of the sealed spec; its default is left out of the identity, so
    every protocol sealed before the field existed keeps its identity (the golden lock too)."""
    def identity(tail: str, name: str) -> str:
        proto = tmp_path / name
        shutil.copytree(toy, proto)
        (proto / "protocol.yaml").write_text((proto / "protocol.yaml").read_text() + tail)
        return seal(proto, ledger=Ledger(tmp_path / f"{name}.sqlite"),
                    check_instrument=False).identity

    plain, empty = identity("", "plain"), identity("  env: []\n", "empty")
    named = identity("  env: [OPENAI_API_KEY]\n", "named")
    assert plain == empty != named


def _replace(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


def test_instrument_check_refuses_a_task_that_cannot_be_failed(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    """An oracle that changes nothing is passed by the do-nothing solver: refused by id."""
    (toy / "oracles" / "toy-001.patch").write_text("")
    result = cli("seal", toy)
    assert result.exit_code == 3, result.stdout + result.stderr  # once 0 on a loaded machine
    assert ("task 'toy-001' cannot be failed: the do-nothing solver got pass" in result.stderr)
    assert not (toy / "protocol.lock").exists()


def test_instrument_check_refuses_a_task_that_cannot_be_passed(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    metric = toy / "metric.py"
    broken = metric.read_text().replace('"pass": _normal', '"pass": "x" in "" and _normal')
    metric.write_text(broken)
    result = cli("seal", toy)
    assert result.exit_code == 3
    assert "task 'toy-000' cannot be passed: the oracle solver got fail" in result.stderr


def test_verify_with_ledger_refuses_a_forged_identity(toy: Path, tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(toy, ledger=ledger)
    lock_path = toy / "protocol.lock"
    lock = json.loads(lock_path.read_text())
    lock["identity"] = "sha256:" + "0" * 64
    lock_path.write_text(json.dumps(lock))
    with pytest.raises(Refused) as caught:
        verify(toy, ledger=ledger)
    assert any("identity does not match" in str(line) for line in caught.value.lines())


def test_lock_text_is_stable(toy: Path, tmp_path: Path) -> None:
    seal(toy, ledger=Ledger(tmp_path / "l.sqlite"))
    lock = Lock.model_validate_json((toy / "protocol.lock").read_bytes())
    assert lock_text(lock) == (toy / "protocol.lock").read_text()


def test_run_uses_the_sealed_solver_path_check(cli, toy: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    inside = write_solver(toy / "agent")
    result = cli("run", toy, "--solver", inside)
    assert result.exit_code == 2
    assert "inside the protocol directory" in result.stderr


def test_missing_protocol_directory_is_bad_input(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for args in (("verify", tmp_path / "nope"), ("run", tmp_path / "nope", "--solver", "true")):
        result = cli(*args)
        assert result.exit_code == 2
        assert "protocol directory not found" in result.stderr


# --------------------------------------------------------------------------- sealed-file writer

# protocol.yaml as a careful author writes it: comments everywhere, an anchor and its alias, a
# folded and a literal scalar, a digest written as a folded scalar followed by a comment, and
# one section with no sha256 key at all (inserted, never by re-dumping the file)
AUTHORED = """\
# The toy exam. Every comment here must survive sealing.
schema: agent-bench-protocol/v1
protocol_id: >-
  toy.v1
dataset:
  path: ./tasks/dataset.jsonl   # the tasks
  # the digest is filled in by `sealbench seal`
  sha256: >-
    PENDING_SEAL
# about the metric
metric:
  # no sha256 key here: the writer inserts one
  module: ./metric.py
budget:
  timeout_sec: 20
  max_files_touched: &three 3
null_pack:
  path: ./tasks/null.jsonl
  sha256: "PENDING_SEAL"
  rules:
    must_pass: ["NP-STUB-01"]
    must_fail: ["NP-POISON-01"]
    must_refuse: ["NP-SECRET-01"]
publish:
  min_n: *three  # the same three
  require_ci: true
  forbidden_fields: ["single_percentage_only"]
solver:
  diff_source: workspace
  task_ids: visible
"""

SEALED = """\
# The toy exam. Every comment here must survive sealing.
schema: agent-bench-protocol/v1
protocol_id: >-
  toy.v1
dataset:
  path: ./tasks/dataset.jsonl   # the tasks
  # the digest is filled in by `sealbench seal`
  sha256: "{dataset}"
# about the metric
metric:
  # no sha256 key here: the writer inserts one
  sha256: "{metric}"
  module: ./metric.py
budget:
  timeout_sec: 20
  max_files_touched: &three 3
null_pack:
  path: ./tasks/null.jsonl
  sha256: "{null_pack}"
  rules:
    must_pass: ["NP-STUB-01"]
    must_fail: ["NP-POISON-01"]
    must_refuse: ["NP-SECRET-01"]
publish:
  min_n: *three  # the same three
  require_ci: true
  forbidden_fields: ["single_percentage_only"]
solver:
  diff_source: workspace
  task_ids: visible
"""


def _digests(toy: Path) -> dict[str, str]:
    lock = Lock.model_validate_json((toy / "protocol.lock").read_bytes())
    by_path = {f.path: f.sha256 for f in lock.files}
    return {"dataset": by_path["tasks/dataset.jsonl"], "metric": by_path["metric.py"],
            "null_pack": by_path["tasks/null.jsonl"]}


def test_anchors_folded_scalars_and_a_missing_key_seal_keeping_every_comment(
        toy: Path, tmp_path: Path) -> None:
    """Golden: the sealed file is the author's, byte for byte, but for the digests."""
    (toy / "protocol.yaml").write_text(AUTHORED)
    result = seal(toy, ledger=Ledger(tmp_path / "l.sqlite"))
    assert result.sealed_path.read_text() == SEALED.format(**_digests(toy))
    verify(toy)  # and it verifies


def test_the_same_exam_written_plainly_has_the_same_identity(toy: Path, tmp_path: Path) -> None:
    """Anchors, folded scalars and comments are layout: the identity is the same exam's."""
    plain = seal(toy, ledger=Ledger(tmp_path / "a.sqlite")).identity
    (toy / "protocol.yaml").write_text(AUTHORED)
    assert seal(toy, ledger=Ledger(tmp_path / "b.sqlite"), check_instrument=False).identity \
        == plain


@pytest.mark.parametrize(("edit", "message"), [
    # a digest anchored and aliased by the other sections: each is filled in its own place
    (lambda t: t.replace('sha256: "PENDING_SEAL"', "sha256: *pend", 2)
     .replace("sha256: *pend", "sha256: &pend PENDING_SEAL", 1), None),
    # a digest's anchor that another field aliases: filling it in would change that field
    (lambda t: t.replace('sha256: "PENDING_SEAL"', "sha256: &pend PENDING_SEAL", 1)
     .replace("task_ids: visible", "task_ids: visible\n  env: [*pend]"), "would change"),
])
def test_aliases_are_sealed_or_refused_in_one_line(toy: Path, tmp_path: Path, cli,  # type: ignore[no-untyped-def]
                                                   edit, message: str | None) -> None:
    (toy / "protocol.yaml").write_text(edit((toy / "protocol.yaml").read_text()))
    done = cli("seal", toy, "--ledger", tmp_path / "l.sqlite")
    if message is None:
        assert done.exit_code == 0, done.stderr
        sealed = (toy / "protocol.sealed.yaml").read_text()
        assert "PENDING_SEAL" not in sealed and "*pend" not in sealed
        return
    assert done.exit_code == 2
    assert done.stderr.startswith("sealbench: ") and "Traceback" not in done.stderr


def test_a_flow_section_without_sha256_gets_one_inserted(toy: Path, tmp_path: Path) -> None:
    text = (toy / "protocol.yaml").read_text().replace(
        'metric:\n  module: ./metric.py\n  sha256: "PENDING_SEAL"\n',
        "metric: {module: ./metric.py}  # written inline\n")
    (toy / "protocol.yaml").write_text(text)
    result = seal(toy, ledger=Ledger(tmp_path / "l.sqlite"), check_instrument=False)
    digest = _digests(toy)["metric"]
    assert f'metric: {{sha256: "{digest}", module: ./metric.py}}  # written inline\n' \
        in result.sealed_path.read_text()


def _lock(files: int, *, environment: bool = False, path: str = "oracles/t{i}.patch") -> Lock:
    from sealbench.environment import EnvironmentRecord
    from sealbench.sealing import LockedFile

    env = EnvironmentRecord(python="3.11", python_full="3.11.7", requirements_sha256="a" * 64,
                            digest="b" * 64) if environment else None
    return Lock(format="sealbench-lock/v3", protocol_id="p.v1", identity="sha256:" + "c" * 64,
                sealed_yaml_sha256="d" * 64, environment=env,
                files=[LockedFile(path=path.format(i=i), role="oracle", sha256=f"{i:064x}",
                                  size=i, mode="100644") for i in range(files)])


@pytest.mark.parametrize("lock", [
    _lock(0), _lock(1), _lock(3, environment=True), _lock(500),
    _lock(2, path="données/tâche \"{i}\"\t.patch"),  # escaped, non-ASCII as \\u
], ids=["empty", "one", "environment", "many", "odd-characters"])
def test_lock_text_is_the_json_dumps_it_always_was(lock: Lock) -> None:
    """Issue 13: the lock is written piece by piece (a 100,000-file manifest joined ~100 MiB
    of pieces); its bytes, which the golden lock pins, must be those of json.dumps."""
    assert lock_text(lock) == json.dumps(lock.model_dump(mode="json", exclude_none=True),
                                         indent=2, sort_keys=True) + "\n"
