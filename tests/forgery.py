"""What a careful dishonest operator does after editing a ledger with sqlite3: recompute every
digest so the run's chain, and the ledger log, link up again (tests/test_tamper.py,
tests/test_rescore.py)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sealbench.ledger import GENESIS, chain_digest, event_digest


def recompute_chain(db: sqlite3.Connection, run_id: str) -> None:
    links: list[tuple[int, str, Any]] = [
        (seq, "attempt", (phase, task, epoch, json.loads(record)))
        for seq, phase, task, epoch, record in db.execute(
            "SELECT seq, phase, task_id, epoch, record FROM attempts WHERE run_id=?", (run_id,))]
    links += [(seq, kind, json.loads(body)) for seq, kind, body in db.execute(
        "SELECT seq, kind, body FROM run_events WHERE run_id=?", (run_id,))]
    prev = GENESIS
    for seq, kind, body in sorted(links, key=lambda link: link[0]):
        if kind == "attempt":
            phase, task, epoch, record = body
            digest = chain_digest(prev, {"run_id": run_id, "seq": seq, "phase": phase,
                                         "task_id": task, "epoch": epoch, **record})
            table = "attempts"
        else:
            digest = event_digest(prev, run_id, seq, kind, body)
            table = "run_events"
        db.execute(f"UPDATE {table} SET prev_digest=?, digest=? WHERE run_id=? AND seq=?",
                   (prev, digest, run_id, seq))
        prev = digest


def recompute_log(db: sqlite3.Connection, run_id: str) -> None:
    """The ledger log rewritten to name the forged chain's header and ends."""
    digests = dict(db.execute("SELECT seq, digest FROM run_events WHERE run_id=?", (run_id,)))
    header = db.execute("SELECT digest FROM run_events WHERE run_id=? AND kind='header'",
                        (run_id,)).fetchone()[0]
    prev = GENESIS
    for seq, kind, logged, text in db.execute(
            "SELECT seq, kind, run_id, body FROM ledger_log ORDER BY seq").fetchall():
        body = json.loads(text)
        if logged == run_id and kind == "created":
            body["header_digest"] = header
        elif logged == run_id and "link_seq" in body:
            body["link_digest"] = digests[body["link_seq"]]
        digest = chain_digest(prev, {"seq": seq, "kind": kind, "run_id": logged, "body": body})
        db.execute("UPDATE ledger_log SET body=?, prev_digest=?, digest=? WHERE seq=?",
                   (json.dumps(body), prev, digest, seq))
        prev = digest
