"""The small protocol every quick bench seals: one shape, written in one place.

Benches run as scripts (`python bench/bench_x.py`), so this directory is on sys.path and they
import it as `benchlib`. A bench chooses its id, budget, solver settings, fixture, metric and
task rows; the controls are the two the gate needs (NP-PASS must pass, NP-FAIL must fail).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def protocol_yaml(protocol_id: str, *, timeout_sec: int, solver: str) -> str:
    """protocol.yaml of a bench protocol; `solver` is the YAML flow mapping of its solver
    section, e.g. "{diff_source: workspace}"."""
    return (
        "schema: agent-bench-protocol/v1\n"
        f"protocol_id: {protocol_id}\n"
        "dataset: {path: ./tasks.jsonl}\n"
        "metric: {module: ./metric.py}\n"
        f"budget: {{timeout_sec: {timeout_sec}}}\n"
        "null_pack: {path: ./null.jsonl, rules: {must_pass: [NP-PASS], must_fail: [NP-FAIL]}}\n"
        "publish: {min_n: 1}\n"
        f"solver: {solver}\n")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def controls(oracle: str, poisoned: str | None = None,
             repo: str = "fixture") -> list[dict[str, Any]]:
    """The gate's two controls on `repo`; NP-FAIL uses `poisoned` as its oracle when given."""
    return [{"id": "NP-PASS", "repo": repo, "oracle": oracle, "expected_class": "must_pass"},
            {"id": "NP-FAIL", "repo": repo, "oracle": poisoned or oracle,
             "expected_class": "must_fail"}]


def write_protocol(root: Path, yaml: str, metric: str, rows: list[dict[str, Any]],
                   null: list[dict[str, Any]]) -> Path:
    """protocol.yaml, metric.py, tasks.jsonl and null.jsonl into root (fixture and oracles
    are the caller's)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "metric.py").write_text(metric)
    write_jsonl(root / "tasks.jsonl", rows)
    write_jsonl(root / "null.jsonl", null)
    (root / "protocol.yaml").write_text(yaml)
    return root
