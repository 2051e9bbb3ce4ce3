"""Signed reports (docs/signing.md): Ed25519 keys, and signatures over the canonical report.

A report recomputed from the ledger proves only that the ledger says so; whoever holds the
ledger can rewrite it. A signature adds *who* vouches for the report: the holder of a private
key that the reader knows the public half of (`verify-report --pubkey FILE`). What is signed is
the canonical JSON of the report (`ledger.canonical`) without its `"signature"` key, so the
signature covers every figure and `records.chain_head`, the head of the run's hash chain.

The key is checked before a run starts (a bad key must not cost a whole run), and hidden from
the solver like the ledger (runner.Run.hidden_reasons).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealbench.errors import BadInput
from sealbench.ledger import canonical

ALGORITHM = "ed25519"
SIGNATURE_FIELD = "signature"  # the report key holding the signature block
PUBLIC_SUFFIX = ".pub"
BLOCK_FIELDS = frozenset({"algorithm", "public_key", "key_fingerprint", "value"})
_KEY_FILE_LIMIT = 64 * 1024  # a PEM Ed25519 key is ~120 bytes: anything far larger is not one


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key and where it came from (a file, or a report's signature block)."""

    key: Ed25519PublicKey
    source: str

    @property
    def raw(self) -> bytes:
        return self.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.raw)


@dataclass(frozen=True)
class SigningKey:
    """A loaded private key. Its path is kept to hide the file from the solver; the key
    bytes are never written anywhere but the signature they make."""

    path: Path
    key: Ed25519PrivateKey

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key(), str(self.path))

    @property
    def fingerprint(self) -> str:
        return self.public.fingerprint


def fingerprint(raw_public_key: bytes) -> str:
    """sha256 of the 32 raw bytes of an Ed25519 public key, in hex: what reports and messages
    name a key by."""
    return hashlib.sha256(raw_public_key).hexdigest()


def public_path(private_path: Path) -> Path:
    """KEY -> KEY.pub, beside it."""
    return private_path.with_name(private_path.name + PUBLIC_SUFFIX)


def check_not_a_key(flag: str, given: Path, key: Path | None) -> None:
    """A file sealbench writes (`--report` and its .md/.html, `--events`) must never be the
    signing key (at path `key`) or its public half: writing it would destroy the key. One
    line, exit 2."""
    if key is None:
        return
    path = given.resolve()
    for what, kept in (("the signing key", key), ("its public key", public_path(key))):
        if path == kept.resolve():
            raise BadInput(f"{flag} {given}: is {what} ({kept}); name another file")


# --------------------------------------------------------------------------- key files


def generate_key(path: Path) -> tuple[SigningKey, Path]:
    """Write a new key pair: the private key at `path` (PEM PKCS8, mode 0600, created so that no
    other mode ever exists) and its public key at `path`.pub (PEM). Never overwrites: an existing
    file at either path is one line, exit 2, and nothing is written."""
    pub = public_path(path)
    for target in (path, pub):
        if target.exists() or target.is_symlink():
            raise BadInput(f"keygen {path}: {target} exists; sealbench never overwrites a key "
                           "(move it away or name another path)")
    if not path.parent.is_dir():
        what = "is not a directory" if path.parent.exists() else "does not exist (create it first)"
        raise BadInput(f"keygen {path}: {path.parent} {what}")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    _create(path, private_pem, 0o600)
    try:
        _create(pub, public_pem, 0o644)
    except BadInput:
        path.unlink()  # a private key whose public half was never written is no use to anyone
        raise
    return SigningKey(path, key), pub


def _create(path: Path, data: bytes, mode: int) -> None:
    """Create path exclusively with mode (O_EXCL: a file that appeared meanwhile is never
    replaced, nor a symlink followed)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise BadInput(f"keygen: {path} exists; sealbench never overwrites a key") from None
    except OSError as exc:
        raise BadInput(f"keygen: {path} cannot be created ({exc.strerror or exc})") from None
    try:
        os.fchmod(fd, mode)  # the umask may only have narrowed it; say exactly what we mean
        os.write(fd, data)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise BadInput(f"keygen: {path} cannot be written ({exc.strerror or exc})") from None
    os.close(fd)


def _read_key_file(path: Path, flag: str) -> bytes:
    """The bytes of a key file, refusing what cannot be one without waiting on it (a FIFO) or
    reading a huge file into memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BadInput(f"{flag} {path}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{flag} {path}: not a regular file")
        data = os.read(fd, _KEY_FILE_LIMIT + 1)
    except OSError as exc:
        raise BadInput(f"{flag} {path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > _KEY_FILE_LIMIT:
        raise BadInput(f"{flag} {path}: larger than {_KEY_FILE_LIMIT} bytes, not a key file")
    return data


def load_signing_key(path: Path, flag: str = "--sign") -> SigningKey:
    """The Ed25519 private key in `path` (PEM PKCS8, as `sealbench keygen` writes it). One line,
    exit 2, naming the file, for a missing, unreadable, garbled, encrypted or non-Ed25519 key,
    a public key given instead, or a key file other users of this host may read."""
    data = _read_key_file(path, flag)
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise BadInput(f"{flag} {path}: holds a public key; signing needs the private key "
                       f"(the file without {PUBLIC_SUFFIX})")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise BadInput(f"{flag} {path}: the key is encrypted; sealbench reads unencrypted keys "
                       "(sealbench keygen writes them readable by their owner only)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(f"{flag} {path}: not a PEM private key (write one with `sealbench "
                       "keygen PATH`)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"{flag} {path}: holds a {_kind(key)} key; sealbench signs with Ed25519 "
                       "(write one with `sealbench keygen PATH`)")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise BadInput(f"{flag} {path}: readable by other users (mode {mode:04o}); "
                       f"`chmod 600 {path}` first")
    return SigningKey(path, key)


def load_public_key(path: Path, flag: str = "--pubkey") -> PublicKey:
    """The Ed25519 public key in `path` (PEM, as KEY.pub). One line, exit 2, naming the file,
    for a missing, garbled or non-Ed25519 key, or a private key given instead."""
    data = _read_key_file(path, flag)
    if b"PRIVATE KEY-----" in data:
        raise BadInput(f"{flag} {path}: holds a private key; give its public half "
                       f"({path.name}{PUBLIC_SUFFIX}), which is all a reader needs")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(f"{flag} {path}: not a PEM public key (sealbench keygen writes it as "
                       f"KEY{PUBLIC_SUFFIX})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput(f"{flag} {path}: holds a {_kind(key)} key; sealbench reports are signed "
                       "with Ed25519")
    return PublicKey(key, str(path))


def _kind(key: object) -> str:
    """A key's algorithm for messages: `RSAPrivateKey` -> `RSA`."""
    name = type(key).__name__.removeprefix("_")
    for suffix in ("PrivateKey", "PublicKey"):
        name = name.removesuffix(suffix)
    return name or "non-Ed25519"


# --------------------------------------------------------------------------- signatures


def signed_content(report: dict[str, Any]) -> bytes:
    """The bytes a signature covers: the canonical JSON of the report without its signature,
    as a reader parses it back from report.json (the JSON round trip makes the signer's view and
    the reader's the same: tuples are lists, float subclasses plain floats)."""
    body = {k: v for k, v in report.items() if k != SIGNATURE_FIELD}
    return canonical(json.loads(canonical(body)))


def sign_report(report: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """The report with its `"signature"` block (docs/formats.md#signature)."""
    value = key.key.sign(signed_content(report))
    public = key.public
    return {**{k: v for k, v in report.items() if k != SIGNATURE_FIELD},
            SIGNATURE_FIELD: {"algorithm": ALGORITHM,
                              "public_key": base64.b64encode(public.raw).decode("ascii"),
                              "key_fingerprint": public.fingerprint,
                              "value": base64.b64encode(value).decode("ascii")}}


@dataclass(frozen=True)
class Verdict:
    """What checking a report's signature found. `problems` empty: valid (or unsigned, with no
    key expected). `authenticated`: checked against a key the reader gave, not only the one the
    report carries (which anyone re-signing would replace with their own)."""

    signed: bool
    problems: list[str]
    fingerprint: str | None = None
    authenticated: bool = False

    def summary(self) -> str:
        """One line for verify-report's output."""
        if not self.signed:
            return "signature: none (the report is not signed)"
        if self.authenticated:
            return f"signature: valid, made by the --pubkey key {self.fingerprint}"
        return (f"signature: valid for the key the report carries ({self.fingerprint}); the "
                "signer is unauthenticated: give --pubkey FILE to check who signed")


def check_signature(report: dict[str, Any], expected: PublicKey | None = None) -> Verdict:
    """Check the report's signature: against `expected` when given (what a reader who knows
    the signer's public key does), else against the key embedded in the report (which proves
    only that the content is what *someone* signed)."""
    block = report.get(SIGNATURE_FIELD)
    if block is None:
        if expected is None:
            return Verdict(False, [])
        return Verdict(False, [f"not signed: the report carries no '{SIGNATURE_FIELD}', and "
                               f"--pubkey {expected.source} ({expected.fingerprint}) expects "
                               "one"])
    parsed = _parse_block(block)
    if isinstance(parsed, str):
        return Verdict(True, [parsed])
    embedded, value = parsed
    if expected is not None and embedded.raw != expected.raw:
        return Verdict(True, [f"signed by another key: the report was signed by "
                              f"{embedded.fingerprint}, --pubkey {expected.source} is "
                              f"{expected.fingerprint}"], embedded.fingerprint)
    try:
        embedded.key.verify(value, signed_content(report))
    except InvalidSignature:
        return Verdict(True, [f"the signature does not match the content: the report was "
                              f"changed after key {embedded.fingerprint} signed it"],
                       embedded.fingerprint)
    return Verdict(True, [], embedded.fingerprint, authenticated=expected is not None)


def _parse_block(block: Any) -> tuple[PublicKey, bytes] | str:
    """The embedded public key and the signature bytes, or why the block is not a valid one
    (named by field, for the one-line message)."""
    where = f"field '{SIGNATURE_FIELD}"
    if not isinstance(block, dict):
        return f"{where}': not an object"
    extra = sorted(set(block) - BLOCK_FIELDS)
    if extra:  # unsigned words beside the signature ("signed_by": ...) would read as vouched
        return f"{where}': unknown field(s) {', '.join(map(repr, extra))}, which nothing signs"
    if block.get("algorithm") != ALGORITHM:
        return f"{where}.algorithm': {block.get('algorithm')!r}, sealbench checks {ALGORITHM!r}"
    raw = _b64(block.get("public_key"), 32)
    if raw is None:
        return f"{where}.public_key': not the base64 of a 32-byte Ed25519 public key"
    value = _b64(block.get("value"), 64)
    if value is None:
        return f"{where}.value': not the base64 of a 64-byte Ed25519 signature"
    if block.get("key_fingerprint") != fingerprint(raw):
        return (f"{where}.key_fingerprint': {block.get('key_fingerprint')!r} is not the "
                f"fingerprint of signature.public_key ({fingerprint(raw)})")
    return PublicKey(Ed25519PublicKey.from_public_bytes(raw), "the report"), value


def _b64(text: Any, size: int) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(data).decode("ascii") != text:
        return None  # non-canonical: another spelling of the same bytes (the padding bits)
    return data if len(data) == size else None


def parse_report(text: str) -> Any:
    """report.json parsed strictly: a key given twice is refused (ValueError), since readers
    disagree on which copy counts and the signature covers only the one Python keeps; so are
    NaN and Infinity, which are not JSON."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice in one object")
            seen[key] = value
        return seen

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
