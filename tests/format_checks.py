"""Every report, comparison and export the suite writes is checked against its shipped schema.

Acceptance 4 of issue 14: `sealbench schema report` validates every report the test suite
produces. tests/conftest.py calls `check_tree` after each test on the test's tmp_path (and at
the end of the session on the whole base temp dir, which module-scoped fixtures write into)
and `check_text` on what the `cli` fixture printed: any document whose `format` names a
shipped schema is validated with jsonschema against the file `sealbench schema NAME` prints —
the shipped bytes, not the models — so a report that does not match its published schema fails
the test that produced it.

A test that writes invalid reports on purpose (a forgery for verify-report to catch) says so
with `@pytest.mark.forged_documents`.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from sealbench.schemas import shipped

# format version -> shipped schema name
CHECKED = {"sealbench-report/v3": "report", "sealbench-compare/v2": "comparison",
           "sealbench-export/v2": "export"}
# directories a test writes that hold no documents (and may be large)
SKIPPED_DIRS = (".artifacts", ".venv", "site-packages", ".git", "node_modules", "__pycache__")
LARGEST = 64 * 1024 * 1024

# documents validated in this process, per schema (printed in the terminal summary)
validated: Counter[str] = Counter()


@cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """The validator of a shipped schema, built once per process."""
    schema = shipped(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def problems(document: Any) -> list[str]:
    """Why `document` does not match the schema its `format` names; [] when it does or when
    it names no shipped schema."""
    if not isinstance(document, dict):
        return []
    name = CHECKED.get(str(document.get("format")))
    if name is None:
        return []
    validated[name] += 1
    errors = sorted(validator(name).iter_errors(document), key=lambda e: list(e.absolute_path))
    return [f"{name}: {'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
            for e in errors[:5]]


def documents(root: Path) -> Iterator[tuple[str, Any]]:
    """(where, parsed document) for every JSON file and JSON Lines line under root that parses;
    files that are not JSON are someone else's business."""
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.endswith(SKIPPED_DIRS)]
        for name in names:
            if not name.endswith((".json", ".jsonl")):
                continue
            path = Path(directory) / name
            try:
                if path.is_symlink() or path.stat().st_size > LARGEST:
                    continue
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            yield from _parsed(str(path), text, lines=name.endswith(".jsonl"))


def _parsed(where: str, text: str, *, lines: bool) -> Iterator[tuple[str, Any]]:
    chunks = [(f"{where}:{n}", line) for n, line in enumerate(text.splitlines(), 1)
              if line.strip()] if lines else [(where, text)]
    for label, chunk in chunks:
        try:
            yield label, json.loads(chunk)
        except ValueError:
            continue


def check_tree(root: Path) -> list[str]:
    """Every problem of every checked document written under root."""
    return [f"{where}: {problem}" for where, document in documents(root)
            for problem in problems(document)]


def check_text(text: str) -> list[str]:
    """What a command printed: one JSON document, or JSON Lines (an export)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return []
    try:
        parsed = [("stdout", json.loads(stripped))]
    except ValueError:
        parsed = list(_parsed("stdout", stripped, lines=True))
    return [f"{where}: {problem}" for where, document in parsed
            for problem in problems(document)]
