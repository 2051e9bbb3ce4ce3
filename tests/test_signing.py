"""Signed reports (signing.py, docs/signing.md): key files, sign/verify over edits, and the
CLI (keygen, run --sign, report --sign, verify-report --pubkey) with its exit statuses.

The solver-side test (the key is never visible in the sandbox) is at the end, marked sandbox.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hostile_helpers import hostile_report, hostile_solver, records, sealed_toy

from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.report import to_json
from sealbench.runner import RunControl, RunInterrupted, RunOptions, _check_same_signer, run
from sealbench.signing import (
    SigningKey,
    check_signature,
    generate_key,
    load_public_key,
    load_signing_key,
    parse_report,
    public_path,
    sign_report,
)

GOLDEN = Path(__file__).parent / "data" / "golden_report.json"


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    (tmp_path / "keys").mkdir()
    return generate_key(tmp_path / "keys" / "sign.key")[0]


@pytest.fixture
def attacker(tmp_path: Path) -> SigningKey:
    return generate_key(tmp_path / "attacker.key")[0]


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


# --------------------------------------------------------------------------- key files


def test_keygen_writes_a_0600_private_key_and_a_public_key_beside_it(tmp_path: Path) -> None:
    made, pub = generate_key(tmp_path / "k")
    assert pub == tmp_path / "k.pub"
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "k").read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert load_signing_key(tmp_path / "k").fingerprint == made.fingerprint \
        == load_public_key(pub).fingerprint


@pytest.mark.parametrize("existing", ["k", "k.pub"])
def test_keygen_never_overwrites_either_file(tmp_path: Path, existing: str) -> None:
    (tmp_path / existing).write_text("precious")
    with pytest.raises(BadInput, match=f"{existing} exists"):
        generate_key(tmp_path / "k")
    assert (tmp_path / existing).read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]  # nothing else written


def test_keygen_into_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="nowhere does not exist"):
        generate_key(tmp_path / "nowhere" / "k")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(BadInput, match="plain is not a directory"):
        generate_key(tmp_path / "plain" / "k")


def _rsa_pem() -> bytes:
    return rsa.generate_private_key(public_exponent=65537, key_size=1024).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


def _encrypted_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"))


# (what the file is, how to make it at path, the words of the refusal)
PRIVATE_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("missing", lambda p: None, "no such file"),
    ("a directory", lambda p: p.mkdir(), "not a regular file"),
    ("a FIFO (never waited on)", lambda p: os.mkfifo(p), "not a regular file"),
    ("empty", lambda p: p.write_bytes(b""), "not a PEM private key"),
    ("garbled", lambda p: p.write_bytes(b"-----BEGIN PRIVATE KEY-----\nAAAA\n"),
     "not a PEM private key"),
    ("a public key", lambda p: shutil.copy(generate_key(p.with_name("x"))[1], p),
     "holds a public key"),
    ("an RSA key", lambda p: p.write_bytes(_rsa_pem()), "holds a RSA key"),
    ("an encrypted key", lambda p: p.write_bytes(_encrypted_pem()), "is encrypted"),
    ("huge", lambda p: p.write_bytes(b"x" * 70_000), "not a key file"),
]


@pytest.mark.parametrize("what,make,words", PRIVATE_CASES, ids=[c[0] for c in PRIVATE_CASES])
def test_a_bad_signing_key_is_one_line_naming_the_file(tmp_path: Path, what: str,
                                                       make: Callable[[Path], None],
                                                       words: str) -> None:
    path = tmp_path / "bad.key"
    make(path)
    if path.is_file():
        path.chmod(0o600)
    with pytest.raises(BadInput) as caught:
        load_signing_key(path)
    message = str(caught.value)
    assert message.startswith(f"--sign {path}: ") and words in message, message
    assert "\n" not in message


def test_a_key_other_users_may_read_is_refused(key: SigningKey) -> None:
    key.path.chmod(0o640)
    with pytest.raises(BadInput, match=r"readable by other users \(mode 0640\); `chmod 600"):
        load_signing_key(key.path)


PUBLIC_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("missing", lambda p: None, "no such file"),
    ("garbled", lambda p: p.write_bytes(b"hello"), "not a PEM public key"),
    ("a private key", lambda p: generate_key(p), "holds a private key"),
    ("an RSA key", lambda p: p.write_bytes(rsa.generate_private_key(
        public_exponent=65537, key_size=1024).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)),
     "holds a RSA key"),
]


@pytest.mark.parametrize("what,make,words", PUBLIC_CASES, ids=[c[0] for c in PUBLIC_CASES])
def test_a_bad_public_key_is_one_line_naming_the_file(tmp_path: Path, what: str,
                                                      make: Callable[[Path], None],
                                                      words: str) -> None:
    path = tmp_path / "bad.pub"
    make(path)
    with pytest.raises(BadInput) as caught:
        load_public_key(path)
    assert str(caught.value).startswith(f"--pubkey {path}: ") and words in str(caught.value)


# --------------------------------------------------------------------------- sign and verify


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit of one field (dotted path, [i] for a list index)."""
    def edit(report: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = report
        for part in parents:
            node = node[part]
        if last.endswith("]"):
            name, index = last[:-1].split("[")
            node[name][int(index)] = value
        else:
            node[last] = value
    return edit


# each edit changes one byte of report.json (or one value as a reader parses it)
CONTENT_EDITS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("mean 1.0 -> 0.0", _set("mean", 0.0)),
    ("n one digit", lambda r: r.__setitem__("n", r["n"] + 1)),
    ("ci95 lower bound", lambda r: r["ci95"].__setitem__(0, r["ci95"][0] + 1e-9)),
    ("chain head one hex digit", lambda r: r["records"].__setitem__(
        "chain_head", "0" + r["records"]["chain_head"][1:])),
    ("run id one letter", lambda r: r.__setitem__("run_id", r["run_id"][:-1] + "X")),
    ("identity one hex digit", lambda r: r.__setitem__("identity", r["identity"][:-1] + (
        "0" if r["identity"][-1] != "0" else "1"))),
    ("solver command", lambda r: r["solver"].__setitem__("command", r["solver"]["command"]
                                                         + " ")),
    ("sandbox bwrap -> none", _set("sandbox", "none")),
    ("a control's outcome", lambda r: r["null_pack"]["controls"][0].__setitem__("ok", False)),
    ("a key added", lambda r: r.__setitem__("note", "trust me")),
    ("a key removed", lambda r: r.pop("timings")),
    ("ledger location (signed too)", lambda r: r["records"].__setitem__("ledger", "/elsewhere")),
]


@pytest.mark.parametrize("what,edit", CONTENT_EDITS, ids=[c[0] for c in CONTENT_EDITS])
@pytest.mark.parametrize("with_pubkey", [True, False], ids=["--pubkey", "embedded key"])
def test_any_edit_of_the_content_breaks_the_signature(key: SigningKey, what: str,
                                                      edit: Callable[[dict[str, Any]], None],
                                                      with_pubkey: bool) -> None:
    signed = sign_report(_golden(), key)
    assert check_signature(signed, key.public if with_pubkey else None).problems == []
    edited = copy.deepcopy(signed)
    edit(edited)
    verdict = check_signature(edited, key.public if with_pubkey else None)
    assert verdict.problems == [f"the signature does not match the content: the report was "
                                f"changed after key {key.fingerprint} signed it"]


def test_every_single_character_change_that_changes_the_content_is_caught(
        key: SigningKey) -> None:
    """Each character of report.json, changed to another: either the JSON no longer parses
    (verify-report: not a readable report), or it parses to the same content (a change of
    layout only, not covered by design), or the signature check fails."""
    text = to_json(sign_report(_golden(), key))
    original = json.loads(text)
    caught = 0
    for index, char in enumerate(text):
        swapped = {"0": "1", "1": "2", "e": "f", "a": "b", '"': "'", " ": "\t"}.get(char, "0")
        try:
            edited = parse_report(text[:index] + swapped + text[index + 1:])
        except ValueError:
            continue
        if edited == original:
            continue
        assert check_signature(edited, key.public).problems, (index, text[index - 20:index + 20])
        caught += 1
    assert caught > 1000


def test_layout_changes_keep_the_signature_valid(key: SigningKey) -> None:
    """The signature covers the content (canonical JSON), not the bytes: re-indented or
    key-reordered report.json still verifies (docs/signing.md)."""
    signed = sign_report(_golden(), key)
    relaid = json.loads(json.dumps(signed, indent=None, sort_keys=False))
    assert check_signature(relaid, key.public).problems == []


def test_signature_stripped_is_caught_only_with_pubkey(key: SigningKey) -> None:
    stripped = sign_report(_golden(), key)
    del stripped["signature"]
    assert check_signature(stripped).problems == []
    assert not check_signature(stripped).signed
    problems = check_signature(stripped, key.public).problems
    assert len(problems) == 1 and problems[0].startswith("not signed: ")
    assert key.fingerprint in problems[0]


def test_re_signed_with_the_attackers_key_is_caught_only_with_pubkey(
        key: SigningKey, attacker: SigningKey) -> None:
    """An operator who edits a figure and re-signs with a key of their own: the report is
    self-consistent, so without --pubkey it verifies (as signed by an unauthenticated key,
    whose fingerprint is printed); --pubkey names both keys."""
    forged = sign_report(_golden(), key)
    forged["mean"] = 0.0
    forged = sign_report(forged, attacker)
    alone = check_signature(forged)
    assert alone.problems == [] and not alone.authenticated
    assert alone.fingerprint == attacker.fingerprint
    assert attacker.fingerprint in alone.summary() and "unauthenticated" in alone.summary()
    assert check_signature(forged, key.public).problems == [
        f"signed by another key: the report was signed by {attacker.fingerprint}, --pubkey "
        f"{key.path} is {key.fingerprint}"]


def test_only_the_public_key_replaced_is_caught_without_pubkey(
        key: SigningKey, attacker: SigningKey) -> None:
    """The attacker's public key (and its fingerprint) swapped in, the signature value kept:
    the value does not verify under that key."""
    signed = sign_report(_golden(), key)
    theirs = sign_report(_golden(), attacker)["signature"]
    signed["signature"]["public_key"] = theirs["public_key"]
    signed["signature"]["key_fingerprint"] = theirs["key_fingerprint"]
    assert "does not match the content" in check_signature(signed).problems[0]


# (the edit of the signature block, the field its message names)
BLOCK_EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("not an object", lambda s: s.__setitem__("signature", "yes"), "'signature': not an object"),
    ("another algorithm", lambda s: s["signature"].__setitem__("algorithm", "rsa"),
     "'signature.algorithm'"),
    ("public key not base64", lambda s: s["signature"].__setitem__("public_key", "!!"),
     "'signature.public_key'"),
    ("value truncated", lambda s: s["signature"].__setitem__("value", "AAAA"),
     "'signature.value'"),
    ("an unsigned field added", lambda s: s["signature"].__setitem__("signed_by", "ACME Labs"),
     "unknown field(s) 'signed_by', which nothing signs"),
    ("fingerprint edited", lambda s: s["signature"].__setitem__("key_fingerprint", "0" * 64),
     "'signature.key_fingerprint'"),
    ("value of another report", lambda s: s["signature"].__setitem__(
        "value", sign_report({"x": 1}, load_signing_key(Path(s["_key"])))["signature"]["value"]),
     "does not match the content"),
]


@pytest.mark.parametrize("what,edit,words", BLOCK_EDITS, ids=[c[0] for c in BLOCK_EDITS])
def test_a_broken_signature_block_is_named(key: SigningKey, what: str,
                                           edit: Callable[[dict[str, Any]], None],
                                           words: str) -> None:
    signed = sign_report(_golden(), key)
    signed["_key"] = str(key.path)
    edit(signed)
    problems = check_signature(signed, key.public).problems
    assert len(problems) == 1 and words in problems[0], problems


def test_a_key_given_twice_in_report_json_is_refused() -> None:
    """json.loads keeps the last copy, other readers the first: the signed value and the one
    a reader sees could differ."""
    with pytest.raises(ValueError, match="'mean' appears twice"):
        parse_report('{"mean": 0.9, "n": 3, "mean": 0.1}')
    with pytest.raises(ValueError, match="NaN is not JSON"):
        parse_report('{"mean": NaN}')


@pytest.mark.parametrize("began,given,words", [
    (None, None, None),
    ("A", "A", None),
    ("A", None, "began signed by key A; resume it with --sign"),
    (None, "B", "began unsigned; it cannot be resumed with --sign"),
    ("A", "B", "began signed by key A; --sign"),
])
def test_a_resume_signs_with_the_key_the_run_began_with(
        key: SigningKey, began: str | None, given: str | None, words: str | None) -> None:
    fingerprints = {"A": key.fingerprint, "B": "b" * 64}
    signer = None if given is None else key if given == "A" else _other_key(key.path)
    start = None if began is None else fingerprints[began]
    if words is None:
        _check_same_signer("r1", start, signer)
        return
    with pytest.raises(Refused) as caught:
        _check_same_signer("r1", start, signer)
    assert words.replace("key A", f"key {key.fingerprint}") in str(caught.value)


def _other_key(beside: Path) -> SigningKey:
    return generate_key(beside.with_name("other.key"))[0]


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def cli_key(tmp_path: Path, cli: Any) -> Path:
    path = tmp_path / "cli.key"
    result = cli("keygen", path)
    assert result.exit_code == 0, result.stderr
    assert load_signing_key(path).fingerprint in result.stdout
    return path


def test_keygen_cli_refuses_to_overwrite(cli: Any, cli_key: Path) -> None:
    before = cli_key.read_bytes()
    result = cli("keygen", cli_key)
    assert result.exit_code == 2 and "never overwrites" in result.stderr
    assert cli_key.read_bytes() == before


def _runs(cli: Any) -> list[dict[str, Any]]:
    return json.loads(cli("runs", "--format", "json").stdout)


def test_run_sign_then_verify_report_pubkey_exit_codes(cli: Any, toy: Path, toy_solver: str,
                                                       cli_key: Path, tmp_path: Path) -> None:
    """Acceptance 2: valid -> 0; one byte changed, another key, unsigned -> 3 naming why."""
    assert cli("seal", toy).exit_code == 0
    report = tmp_path / "out" / "r.json"
    result = cli("run", toy, "--solver", toy_solver, "--quiet", "--sign", cli_key,
                 "--report", report)
    assert result.exit_code == 0, result.stderr
    fp = load_signing_key(cli_key).fingerprint
    assert f"signed     ed25519 key {fp}" in result.stdout
    data = json.loads(report.read_text())
    assert data["signature"]["key_fingerprint"] == fp
    assert fp in report.with_suffix(".md").read_text()
    assert fp in report.with_suffix(".html").read_text()
    run_id = data["run_id"]
    assert _runs(cli)[0]["run_id"] == run_id

    ok = cli("verify-report", report, "--pubkey", public_path(cli_key))
    assert ok.exit_code == 0, ok.stderr
    assert f"signature: valid, made by the --pubkey key {fp}" in ok.stdout
    alone = cli("verify-report", report)
    assert alone.exit_code == 0 and "unauthenticated" in alone.stdout and fp in alone.stdout

    # one byte of report.json: the run id's last character (no figure changes)
    text = report.read_text()
    where = text.index(f'"run_id": "{run_id}"') + len('"run_id": "') + len(run_id) - 1
    changed = tmp_path / "changed.json"
    changed.write_text(text[:where] + ("x" if text[where] != "x" else "y") + text[where + 1:])
    bad = cli("verify-report", changed, "--pubkey", public_path(cli_key))
    assert bad.exit_code == 3
    assert "the signature does not match the content" in bad.stderr

    # one byte of the format: still the signature's business (exit 3), not "bad input"
    changed.write_text(text.replace("sealbench-report/v", "sealbench-report/w"))
    fmt = cli("verify-report", changed, "--pubkey", public_path(cli_key))
    assert fmt.exit_code == 3
    assert "the signature does not match the content" in fmt.stderr
    assert "field 'format'" in fmt.stderr

    other = tmp_path / "other.key"
    assert cli("keygen", other).exit_code == 0
    wrong = cli("verify-report", report, "--pubkey", public_path(other))
    assert wrong.exit_code == 3
    assert "signed by another key" in wrong.stderr and fp in wrong.stderr
    assert load_signing_key(other).fingerprint in wrong.stderr

    unsigned = tmp_path / "unsigned.json"
    unsigned.write_text(to_json({k: v for k, v in data.items() if k != "signature"}))
    stripped = cli("verify-report", unsigned)
    assert stripped.exit_code == 0  # still a true report; the run header says it was signed
    assert f"published a report signed by key {fp}; this copy carries no signature" \
        in stripped.stdout
    nosig = cli("verify-report", unsigned, "--pubkey", public_path(cli_key))
    assert nosig.exit_code == 3 and "not signed" in nosig.stderr

    assert cli("verify-report", report, "--pubkey", cli_key).exit_code == 2  # the private key

    # a reader with the report and the public key but no ledger: the signature is still said
    nowhere = tmp_path / "no-ledger.sqlite"
    alone = cli("verify-report", report, "--pubkey", public_path(cli_key), "--ledger", nowhere)
    assert alone.exit_code == 2 and "ledger not found" in alone.stderr
    assert f"signature: valid, made by the --pubkey key {fp}; its figures were not checked" \
        in alone.stderr
    edited = cli("verify-report", changed, "--pubkey", public_path(cli_key), "--ledger", nowhere)
    assert edited.exit_code == 3 and "does not match the content" in edited.stderr

    # report --sign: the recomputed report, signed, verifies; md with --sign is refused
    again = cli("report", run_id, "--sign", cli_key)
    assert again.exit_code == 0, again.stderr
    recomputed = tmp_path / "recomputed.json"
    recomputed.write_text(again.stdout)
    assert cli("verify-report", recomputed, "--pubkey", public_path(cli_key)).exit_code == 0
    md = cli("report", run_id, "--format", "md", "--sign", cli_key)
    assert md.exit_code == 2 and "--format json only" in md.stderr


def test_report_sign_refuses_records_that_do_not_verify(cli: Any, toy: Path, toy_solver: str,
                                                        cli_key: Path) -> None:
    """A signature vouches for the chain head: an attempt record edited in the ledger (chain
    not recomputed) is not signed, exit 3 naming the record."""
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--quiet")
    assert result.exit_code == 0, result.stderr
    run_id = _runs(cli)[0]["run_id"]
    db = sqlite3.connect(os.environ["SEALBENCH_LEDGER"], isolation_level=None)
    text = db.execute("SELECT record FROM attempts WHERE run_id=? AND seq=4",
                      (run_id,)).fetchone()[0]
    db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=4",
               (text.replace('"duration": ', '"duration": 1'), run_id))
    db.close()
    signed = cli("report", run_id, "--sign", cli_key)
    assert signed.exit_code == 3
    assert "chain broken at link 4" in signed.stderr and "signature" not in signed.stdout


def test_a_bad_key_is_refused_before_the_run_starts(cli: Any, toy: Path, toy_solver: str,
                                                    tmp_path: Path) -> None:
    assert cli("seal", toy).exit_code == 0
    garbled = tmp_path / "garbled.key"
    garbled.write_text("not a key")
    garbled.chmod(0o600)
    for key in (garbled, tmp_path / "missing.key"):
        result = cli("run", toy, "--solver", toy_solver, "--sign", key)
        assert result.exit_code == 2
        assert result.stderr.startswith(f"sealbench: --sign {key}: ")
        assert len(result.stderr.splitlines()) == 1
    assert _runs(cli) == []  # no attempt ran, no run recorded


def test_the_key_comes_from_the_environment_and_a_trial_ignores_it(
        cli: Any, toy: Path, toy_solver: str, cli_key: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli("seal", toy).exit_code == 0
    monkeypatch.setenv("SEALBENCH_SIGNING_KEY", str(cli_key))
    trial = cli("run", toy, "--solver", toy_solver, "--task", "toy-000", "--quiet")
    assert trial.exit_code == 0, trial.stderr
    given = cli("run", toy, "--solver", toy_solver, "--task", "toy-000", "--sign", cli_key)
    assert given.exit_code == 2 and "a trial (--task, --limit) writes no report" in given.stderr
    result = cli("run", toy, "--solver", toy_solver, "--quiet")
    assert result.exit_code == 0, result.stderr
    assert "signed     ed25519 key" in result.stdout
    monkeypatch.setenv("SEALBENCH_SIGNING_KEY", "")  # empty: not signing
    plain = cli("run", toy, "--solver", toy_solver, "--quiet")
    assert plain.exit_code == 0 and "signed" not in plain.stdout


def test_sign_without_a_sandbox_or_with_the_key_in_home_from_is_refused(
        cli: Any, toy: Path, toy_solver: str, tmp_path: Path) -> None:
    assert cli("seal", toy).exit_code == 0
    home = tmp_path / "agent-home"
    home.mkdir()
    assert cli("keygen", home / "k").exit_code == 0
    none = cli("run", toy, "--solver", toy_solver, "--sandbox", "none", "--sign", home / "k")
    assert none.exit_code == 3
    assert "no sandbox is available" in none.stderr and "could read the signing key" \
        in none.stderr
    copied = cli("run", toy, "--solver", toy_solver, "--home-from", home, "--sign", home / "k")
    assert copied.exit_code == 2 and "holds the signing key" in copied.stderr
    assert _runs(cli) == []


def test_no_file_sealbench_writes_may_be_the_key(cli: Any, toy: Path, toy_solver: str,
                                                 cli_key: Path) -> None:
    """--report (the JSON itself, or the .md/.html beside it) and --events are written over:
    naming the key or its .pub would destroy it."""
    assert cli("seal", toy).exit_code == 0
    before = cli_key.read_bytes(), public_path(cli_key).read_bytes()
    for flag, path in (("--report", cli_key), ("--report", cli_key.with_suffix(".json")),
                       ("--report", public_path(cli_key)), ("--events", cli_key),
                       ("--events", public_path(cli_key))):
        result = cli("run", toy, "--solver", toy_solver, "--sign", cli_key, flag, path)
        if path.suffix == ".json":
            assert result.exit_code == 0, result.stderr  # cli.json, cli.md, cli.html: not the key
            continue
        assert result.exit_code == 2, (flag, path, result.stderr)
        assert "name another file" in result.stderr
    assert (cli_key.read_bytes(), public_path(cli_key).read_bytes()) == before
    # --report x.json writes x.md beside it: a key named x.md is caught too
    md_key = cli_key.with_name("signing.md")
    cli_key.rename(md_key)
    result = cli("run", toy, "--solver", toy_solver, "--sign", md_key, "--report",
                 md_key.with_suffix(".json"))
    assert result.exit_code == 2 and "is the signing key" in result.stderr


def test_resume_of_a_signed_run_needs_the_same_key(cli: Any, toy: Path, toy_solver: str,
                                                   cli_key: Path, tmp_path: Path) -> None:
    """The run header keeps the key's fingerprint (never the key); a resume with no key or
    another is refused, with the same key it publishes a signed report."""
    assert cli("seal", toy).exit_code == 0
    ledger = Ledger(Path(os.environ["SEALBENCH_LEDGER"]))
    control = RunControl()

    def stop_after_first(kind: str, _data: dict[str, Any]) -> None:
        if kind == "attempt":
            control.interrupt()

    with pytest.raises(RunInterrupted):
        run(toy, toy_solver, ledger=ledger, run_id="s1", control=control,
            on_event=stop_after_first,
            options=RunOptions(signer=load_signing_key(cli_key)))
    assert ledger.run("s1").options["signing_key"] == load_signing_key(cli_key).fingerprint
    assert str(cli_key) not in json.dumps(ledger.run("s1").options)
    other = tmp_path / "other.key"
    assert cli("keygen", other).exit_code == 0
    unsigned = cli("run", toy, "--solver", toy_solver, "--resume", "s1")
    assert unsigned.exit_code == 3 and "began signed by key" in unsigned.stderr
    wrong = cli("run", toy, "--solver", toy_solver, "--resume", "s1", "--sign", other)
    assert wrong.exit_code == 3 and "resume with the key it began with" in wrong.stderr
    right = cli("run", toy, "--solver", toy_solver, "--resume", "s1", "--sign", cli_key,
                "--quiet")
    assert right.exit_code == 0, right.stderr
    assert "signed     ed25519 key" in right.stdout


# --------------------------------------------------------------------------- the solver's view


@pytest.fixture
def base() -> Iterator[Path]:
    """Outside the host's /tmp (the sandbox's /tmp is private: a key there would be hidden
    for free and the test would prove nothing); see tests/test_hostile.py."""
    path = Path(tempfile.mkdtemp(prefix="sealbench-sign-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# The solver looks for the key everywhere it could be: the path it was given on its command
# line (and its real path), the key's directory (exposed to it), /, /root, $HOME, and every
# /proc/*/environ and /proc/*/cmdline it can read. It reports what it read; the TEST decides
# whether any of it is key material (the solver script must not hold the key's bytes).
HUNT = r'''
import base64, glob, time
if TASK.startswith("toy-001") or CFG["blind"]:
    found = {}
    def grab(label, path, size=65536):
        try:
            with open(path, "rb") as handle:
                found[label + " " + path] = base64.b64encode(handle.read(size)).decode()
        except OSError as exc:
            found[label + " " + path] = "error: " + type(exc).__name__
    key_arg = sys.argv[1]
    grab("argv", key_arg)
    grab("realpath", os.path.realpath(key_arg))
    grab("config", CFG["key"])
    marker = ("PRIVATE" + " KEY").encode()
    skip = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
    walked, deadline = 0, time.monotonic() + 15
    for top in ["/", "/root", os.environ.get("HOME", "/"), os.path.dirname(key_arg)]:
        for directory, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if os.path.join(directory, d) not in skip]
            if time.monotonic() > deadline:
                break
            for name in files:
                walked += 1
                path = os.path.join(directory, name)
                try:
                    with open(path, "rb") as handle:
                        head = handle.read(4096)
                except OSError:
                    continue
                if marker in head:
                    found["marker " + path] = base64.b64encode(head).decode()
    for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
        grab("proc", path)
    report(found=found, walked=walked, env=dict(os.environ),
           listing=sorted(os.listdir(os.path.dirname(key_arg))))
'''


@pytest.mark.sandbox
@pytest.mark.parametrize("where", ["exposed directory, via a symlink", "beside the solver"])
def test_the_signing_key_is_never_visible_to_the_solver(base: Path, where: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile solver given the key's path on its command line, with the key's directory
    visible to it (exposed, or the solver's own directory, which is bound) and
    $SEALBENCH_SIGNING_KEY set on the host, finds no byte of the key."""
    proto, ledger = sealed_toy(base, timeout=60)
    keys = base / ("keys" if where.startswith("exposed") else "agent")
    keys.mkdir()
    key, pub = generate_key(keys / "sign.key")
    given = key.path
    if where.startswith("exposed"):
        given = keys / "alias.key"
        given.symlink_to(key.path)  # the path it is given is a symlink to the key
    monkeypatch.setenv("SEALBENCH_SIGNING_KEY", str(key.path))
    command = hostile_solver(base / "agent", before=HUNT, key=str(key.path), blind=False)
    command = f"{command} {given}"
    result = run(proto, command, ledger=ledger,
                 options=RunOptions(jobs=2, signer=load_signing_key(given),
                                    expose=(keys,) if keys.name == "keys" else (),
                                    report_path=base / "out" / "r.json"))
    seen = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])

    secrets = [key.path.read_bytes()]
    secrets += [line.encode() for line in key.path.read_text().splitlines()
                if "-----" not in line]
    secrets.append(key.key.private_bytes(serialization.Encoding.Raw,
                                         serialization.PrivateFormat.Raw,
                                         serialization.NoEncryption()))
    read = {label: base64.b64decode(text) for label, text in seen["found"].items()
            if not text.startswith("error: ")}
    leaked = {label for label, data in read.items() for s in secrets if s in data}
    assert leaked == set()
    # (files holding some other PEM private key, e.g. test keys of installed packages, are
    # reported with their content: none of them is this key)
    # the key's paths were looked at, and read as nothing (or not at all)
    for label in (f"argv {given}", f"config {key.path}"):
        assert read.get(label, b"") == b"", label
    assert seen["walked"] > 0
    assert any(label.startswith("proc /proc/") for label in seen["found"])
    # the public half beside it stays readable: only the private key is hidden
    assert pub.name in seen["listing"]
    assert "SEALBENCH_SIGNING_KEY" not in seen["env"]
    assert not any(str(key.path) in value for value in seen["env"].values())
    # and the run was signed with it
    data = json.loads((base / "out" / "r.json").read_text())
    assert check_signature(data, load_public_key(pub)).problems == []


@pytest.mark.parametrize("field", ["value", "public_key"])
def test_another_base64_spelling_of_the_same_bytes_is_refused(key: SigningKey,
                                                              field: str) -> None:
    """The last base64 character before '=' carries unused bits: flipping them spells the same
    bytes. A signature block must be the one canonical spelling, else a 'changed' report still
    verifies (this test found it: one random key in eight failed the character sweep)."""
    signed = sign_report(_golden(), key)
    text = signed["signature"][field]
    body = text.rstrip("=")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(body[-1])
    respelled = body[:-1] + alphabet[last ^ 1] + text[len(body):]
    assert base64.b64decode(respelled) == base64.b64decode(text)
    signed["signature"][field] = respelled
    assert check_signature(signed, key.public).problems
