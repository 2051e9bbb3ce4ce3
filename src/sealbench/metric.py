"""The sealed metric function (docs/protocol.md, docs/sealing.md).

The metric is compiled from the bytes that were hashed and checked against the lock, never
re-read from disk afterwards: a metric file swapped between `verify` and scoring must not score.
"""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealbench.errors import BadInput, Refused


@dataclass(frozen=True)
class MetricResult:
    """What `score()` said, checked for shape; `error` is set when the metric itself failed."""

    passed: bool
    name: str
    raw: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True)
class Metric:
    """A loaded `score(result_diff, oracle_path) -> {"pass": bool, "metric": str}`."""

    path: str
    sha256: str
    function: Any

    @classmethod
    def from_bytes(cls, code: bytes, path: str, expected_sha256: str | None = None) -> Metric:
        """Compile a metric module from verified bytes; refuse bytes that are not sealed."""
        digest = hashlib.sha256(code).hexdigest()
        if expected_sha256 is not None and digest != expected_sha256:
            raise Refused(f"{path}: metric module differs from the sealed one (tampered)")
        module = types.ModuleType("sealbench_sealed_metric")
        module.__file__ = path
        try:
            exec(compile(code, path, "exec"), module.__dict__)
        except Exception as exc:  # the metric is user code: any failure is bad input
            raise BadInput(
                f"{path}: metric module failed to load: {type(exc).__name__}: {exc}"
            ) from None
        function = getattr(module, "score", None)
        if not callable(function):
            raise BadInput(f"{path}: field 'score': metric module defines no score() function")
        return cls(path, digest, function)

    def score(self, result_diff: str, oracle_path: Path) -> MetricResult:
        """Call the metric; any exception or malformed return becomes an `error`, not a crash."""
        try:
            raw = self.function(result_diff, str(oracle_path))
        except Exception as exc:  # user code
            return MetricResult(False, "", {}, f"{type(exc).__name__}: {exc}")
        if not isinstance(raw, dict) or not isinstance(raw.get("pass"), bool):
            return MetricResult(False, "", {}, f"score() must return a dict with a bool 'pass', "
                                f"got {raw!r:.200}")
        name = raw.get("metric")
        return MetricResult(raw["pass"], str(name) if name is not None else "", _jsonable(raw))


def _jsonable(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep what JSON can store; the ledger must never fail on what a metric returned."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, str | int | float | bool) or value is None:
            out[str(key)] = value
        else:
            out[str(key)] = repr(value)
    return out
