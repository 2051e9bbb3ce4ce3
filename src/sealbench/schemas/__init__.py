"""The JSON Schemas sealbench ships, and the registry they are generated from.

Each schema is generated from the models that define its format (`sealbench.formats`, and
`sealbench.events` for the event stream) and shipped twice, byte for byte: in the package
(`sealbench/schemas/NAME.schema.json`, package data, so an installed wheel has them and
`sealbench schema NAME` prints them without importing pydantic) and in the repository's
`docs/schemas/` for readers. `python -m sealbench.schemas` (or `make schemas`) regenerates both;
tests/test_formats.py fails when a model changes and the shipped file does not — a format may
not change silently.

Adding a format is one line in SCHEMAS: its name and "module:attribute", where the attribute is
a pydantic model or a function returning the schema as a dict. This module imports only the
standard library: the CLI reads SCHEMAS for `sealbench schema`'s choices at start-up.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# name -> "module:attribute" (a pydantic model, or a function returning the schema dict)
SCHEMAS: dict[str, str] = {
    "report": "sealbench.formats:Report",
    "comparison": "sealbench.formats:Comparison",
    "export": "sealbench.formats:ExportLine",
    "events": "sealbench.events:schema",
    "leaderboard": "sealbench.formats:Leaderboard",
}

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://sealbench.dev/schemas/"
# the repository's copy for readers; absent in an installed wheel (only the package's is)
DOCS_DIR = Path(__file__).resolve().parents[3] / "docs" / "schemas"


def file_name(name: str) -> str:
    return f"{name}.schema.json"


def shipped_text(name: str) -> str:
    """The schema as shipped in the package: what `sealbench schema NAME` prints."""
    from importlib.resources import files  # here, not at import: the CLI reads SCHEMAS at
    # start-up, and `--help` has no time for importlib.resources (bench/bench_startup.py)

    if name not in SCHEMAS:
        raise KeyError(f"no schema named {name!r}; known: {', '.join(sorted(SCHEMAS))}")
    return files(__name__).joinpath(file_name(name)).read_text(encoding="utf-8")


def shipped(name: str) -> dict[str, Any]:
    import json

    loaded: dict[str, Any] = json.loads(shipped_text(name))
    return loaded


def generate(name: str) -> dict[str, Any]:
    """The schema of format `name`, generated from its models now (draft 2020-12)."""
    import importlib

    module_name, _, attribute = SCHEMAS[name].partition(":")
    source = getattr(importlib.import_module(module_name), attribute)
    if hasattr(source, "model_json_schema"):
        body: dict[str, Any] = source.model_json_schema()
        return {"$schema": DRAFT, "$id": ID_BASE + file_name(name), **body}
    made: dict[str, Any] = source()
    return made


def generated_text(name: str) -> str:
    """The bytes a shipped schema file must hold: sorted keys, indent 2, trailing newline."""
    import json

    return json.dumps(generate(name), indent=2, sort_keys=True) + "\n"


def regenerate(package_dir: Path, docs_dir: Path | None) -> list[Path]:
    """Write every schema into the package (and docs/schemas/ when given); the paths written."""
    written = []
    for name in sorted(SCHEMAS):
        text = generated_text(name)
        for directory in (package_dir, docs_dir):
            if directory is None:
                continue
            path = directory / file_name(name)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def main() -> None:
    """`python -m sealbench.schemas`: regenerate the shipped schemas from a source checkout."""
    docs = DOCS_DIR if DOCS_DIR.parent.is_dir() else None
    for path in regenerate(Path(__file__).resolve().parent, docs):
        sys.stdout.write(f"wrote {path}\n")


if __name__ == "__main__":
    main()
