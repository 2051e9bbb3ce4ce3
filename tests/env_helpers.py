"""Wheels made on the spot, so environment tests install real packages with no network.

A wheel is a zip with the package's files and a `.dist-info` directory (METADATA, WHEEL and
RECORD, PEP 427); writing one takes no build backend, which an offline machine may lack.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def make_wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """Write `{name}-{version}-py3-none-any.whl` into directory: `files` maps paths inside the
    wheel (e.g. `tinypkg/__init__.py`) to their text."""
    directory.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    contents = {path: text.encode() for path, text in files.items()}
    contents[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\n"
                                    f"Version: {version}\n").encode()
    contents[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: sealbench-tests\n"
                                 b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n"
                     for path, data in contents.items()) + f"{info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in contents.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/RECORD", record)
    return wheel


def tiny_package(directory: Path, version: str = "1.0") -> Path:
    """The wheel of `tinypkg`, a 3-line package: `tinypkg.VALUE` says which version it is."""
    return make_wheel(directory, "tinypkg", version, {
        "tinypkg/__init__.py": f'"""A package for tests."""\n\nVALUE = "tinypkg {version}"\n'})
