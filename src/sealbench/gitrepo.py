"""Git's on-disk formats, written directly: objects, a pack with its index, the staging index.

Why not run git? Laying out a workspace's one-commit repository with git costs half a dozen
processes per fixture (init, add, commit, repack...), which dominates a run's preparation on a
large protocol. The formats involved are small, stable and documented (gitformat-pack,
gitformat-index), and the tests check the result with `git fsck`, `git status` and `git log`.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

OBJ_COMMIT, OBJ_TREE, OBJ_BLOB = 1, 2, 3
KIND_CODES = {b"commit": OBJ_COMMIT, b"tree": OBJ_TREE, b"blob": OBJ_BLOB}
FIXED_DATE = b"946684800 +0000"  # 2000-01-01: the same commit bytes on every machine
IDENTITY = b"sealbench <fixture@sealbench.invalid>"
BRANCH = "main"


@dataclass(frozen=True)
class GitObject:
    kind: bytes
    data: bytes
    oid: str

    @classmethod
    def of(cls, kind: bytes, data: bytes) -> GitObject:
        raw = kind + b" %d\0" % len(data) + data
        return cls(kind, data, hashlib.sha1(raw, usedforsecurity=False).hexdigest())


@dataclass(frozen=True)
class FileEntry:
    """What git needs of a tracked file: its mode and content (a symlink's is its target)."""

    mode: int
    data: bytes


def tree_objects(files: Mapping[str, FileEntry]) -> tuple[str, list[GitObject]]:
    """Every blob and tree object of a flat path map; returns the root tree id and objects."""
    nested: dict[str, object] = {}
    for rel, entry in files.items():
        node = nested
        *dirs, name = rel.split("/")
        for part in dirs:
            child = node.setdefault(part, {})
            assert isinstance(child, dict)
            node = child
        node[name] = entry
    objects: dict[str, GitObject] = {}
    root = _write_nested(nested, objects)
    return root, list(objects.values())


def _write_nested(node: dict[str, object], objects: dict[str, GitObject]) -> str:
    rows: list[tuple[bytes, bytes]] = []
    for name, child in node.items():
        raw_name = name.encode("utf-8", errors="surrogateescape")
        if isinstance(child, FileEntry):
            blob = GitObject.of(b"blob", child.data)
            objects.setdefault(blob.oid, blob)
            rows.append((raw_name, b"%o %s\0" % (child.mode, raw_name) + bytes.fromhex(blob.oid)))
        else:
            assert isinstance(child, dict)
            oid = _write_nested(child, objects)
            # git sorts a subtree as if its name ended with "/"
            rows.append((raw_name + b"/", b"40000 %s\0" % raw_name + bytes.fromhex(oid)))
    rows.sort(key=lambda row: row[0])
    tree = GitObject.of(b"tree", b"".join(row[1] for row in rows))
    objects.setdefault(tree.oid, tree)
    return tree.oid


def commit_object(tree: str, message: bytes = b"fixture\n") -> GitObject:
    body = (b"tree %s\nauthor %s %s\ncommitter %s %s\n\n" %
            (tree.encode(), IDENTITY, FIXED_DATE, IDENTITY, FIXED_DATE)) + message
    return GitObject.of(b"commit", body)


def _pack_header(kind: int, size: int) -> bytes:
    first = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(first | 0x80)
        first = size & 0x7F
        size >>= 7
    out.append(first)
    return bytes(out)


def write_pack(objects: Iterable[GitObject]) -> tuple[str, bytes, bytes]:
    """A version-2 pack of the objects (no deltas) and its version-2 index.

    Returns the pack's name (its checksum), the pack bytes and the index bytes.
    """
    objects = list(objects)
    pack = bytearray(b"PACK" + struct.pack(">II", 2, len(objects)))
    placed: list[tuple[bytes, int, int]] = []  # (oid, crc32, offset)
    for obj in objects:
        entry = _pack_header(KIND_CODES[obj.kind], len(obj.data)) + zlib.compress(obj.data, 1)
        placed.append((bytes.fromhex(obj.oid), zlib.crc32(entry), len(pack)))
        pack += entry
    checksum = hashlib.sha1(pack, usedforsecurity=False).digest()
    pack += checksum
    placed.sort()
    fanout = [0] * 256
    for oid, _, _ in placed:
        fanout[oid[0]] += 1
    running = 0
    for i in range(256):
        running += fanout[i]
        fanout[i] = running
    index = bytearray(b"\377tOc" + struct.pack(">I", 2))
    index += struct.pack(">256I", *fanout)
    index += b"".join(oid for oid, _, _ in placed)
    index += b"".join(struct.pack(">I", crc) for _, crc, _ in placed)
    index += b"".join(struct.pack(">I", offset) for _, _, offset in placed)
    index += checksum
    index += hashlib.sha1(index, usedforsecurity=False).digest()
    return checksum.hex(), bytes(pack), bytes(index)


def write_index(files: Mapping[str, FileEntry], blob_ids: Mapping[str, str]) -> bytes:
    """A version-2 staging index with zeroed stat data: git then re-checks each file's content
    once and finds it clean, so `git status` in a fresh workspace shows nothing."""
    entries = sorted((rel.encode("utf-8", errors="surrogateescape"), rel) for rel in files)
    out = bytearray(b"DIRC" + struct.pack(">II", 2, len(entries)))
    for raw, rel in entries:
        entry = struct.pack(">10I", 0, 0, 0, 0, 0, 0, files[rel].mode, 0, 0,
                            len(files[rel].data) & 0xFFFFFFFF)
        entry += bytes.fromhex(blob_ids[rel]) + struct.pack(">H", min(len(raw), 0xFFF)) + raw
        entry += b"\0" * (8 - len(entry) % 8)
        out += entry
    out += hashlib.sha1(out, usedforsecurity=False).digest()
    return bytes(out)


def repository_files(files: Mapping[str, FileEntry]) -> tuple[dict[str, bytes], list[str]]:
    """The `.git` of a repository holding `files` in one commit on `main`.

    Returns the files (path under .git -> bytes) and the directories git expects to exist.
    """
    git_files = {
        "HEAD": f"ref: refs/heads/{BRANCH}\n".encode(),
        "config": b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n"
                  b"\tbare = false\n\tlogallrefupdates = true\n",
    }
    dirs = ["objects/info", "objects/pack", "refs/heads", "refs/tags"]
    if not files:
        return git_files, dirs
    root, objects = tree_objects(files)
    commit = commit_object(root)
    name, pack, index = write_pack([*objects, commit])
    git_files[f"objects/pack/pack-{name}.pack"] = pack
    git_files[f"objects/pack/pack-{name}.idx"] = index
    git_files[f"refs/heads/{BRANCH}"] = commit.oid.encode() + b"\n"
    blob_ids = {rel: GitObject.of(b"blob", entry.data).oid for rel, entry in files.items()}
    git_files["index"] = write_index(files, blob_ids)
    return git_files, dirs
