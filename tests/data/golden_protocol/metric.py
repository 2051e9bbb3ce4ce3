from pathlib import Path


def _normal(diff):
    kept = []
    for line in diff.splitlines():
        if line.startswith(("index ", "diff --git", "---", "+++")):
            continue
        kept.append(line.rstrip())
    return "\n".join(kept)


def score(result_diff, oracle_path):
    return {"pass": _normal(result_diff) == _normal(Path(oracle_path).read_text()),
            "metric": "exact_diff_v1"}
