"""Hostile solvers: real scripts run through `sealbench run` that try to cheat or break out.

Each test appends hostile code to the toy solver (tests/toy.py), acting on one task (usually
toy-001) so the null pack still passes and the dataset runs, then checks the attempt's ledger
record and the host. The protocol, the ledger and the solver live OUTSIDE the host's /tmp
(in /var/tmp): the sandbox mounts a private /tmp anyway, so a protocol kept in pytest's
tmp_path would be hidden twice and the test would not exercise the hiding of the protocol dir,
the ledger and its artifacts at all.

What a solver finds is written to its stderr as a `HOSTILE-REPORT {json}` line (see
tests/hostile_helpers.py); the harness stores stderr in the ledger, so the test reads it back.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import (
    Sampler,
    artifact_text,
    hostile_report,
    hostile_solver,
    kill_matching,
    processes_matching,
    records,
    sealed_toy,
    wait_until_gone,
)
from toy import make_protocol, write_solver

from sealbench.errors import Refused
from sealbench.ledger import Ledger
from sealbench.runner import RunOptions, run
from sealbench.sandbox import command_files as solver_files
from sealbench.sealing import seal, verify

pytestmark = pytest.mark.sandbox

# What the toy fixtures and oracles contain, spelled so that these literals never appear in a
# solver script (solver scripts are visible to the solver, and some tests search for these).
SOLVED = "colour {} is good"
BROKEN = "colour {} is bad"
SQLITE = "SQLite format 3"


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory for protocol, ledger and solver outside the host's /tmp (see module doc)."""
    parent = Path("/var/tmp")
    assert not parent.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    path = Path(tempfile.mkdtemp(prefix="sealbench-hostile-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A fresh directory elsewhere on the host (under /srv), outside every private dir of the
    sandbox and named by no option: what the allow-list must leave out."""
    parent = Path("/srv")
    parent.mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="sealbench-elsewhere-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_dir()}


# --------------------------------------------------------------------------- 1. the oracle

READ_THE_ORACLE = r'''
if TASK == "toy-001":
    import ctypes, subprocess
    contents, errors, listings, mounts, fds, hits = {}, {}, {}, {}, {}, []
    ws = os.getcwd()
    scratch = os.path.dirname(os.path.dirname(ws))

    def grab(label, path):
        try:
            with open(path, "rb") as handle:
                contents[label] = handle.read(1 << 20).decode("utf-8", "replace")
        except OSError as exc:
            errors[label] = f"{type(exc).__name__}: {exc}"

    def grab_all(prefix, root=""):
        grab(prefix + "oracle", root + CFG["oracle"])
        for rel in CFG["protocol_files"]:
            grab(prefix + rel, root + os.path.join(CFG["protocol"], rel))
        for path in CFG["ledger_files"]:
            grab(prefix + path, root + path)
        grab(prefix + "scratch oracle", root + os.path.join(scratch, "oracles", "toy-001.patch"))
        objects = os.path.join(scratch, "objects.git")
        for label, path in (("protocol", CFG["protocol"]), ("artifacts", CFG["artifacts"]),
                            ("scratch", scratch), ("objects", objects)):
            try:
                listings[prefix + label] = sorted(os.listdir(root + path))
            except OSError as exc:
                errors[prefix + "ls " + label] = f"{type(exc).__name__}: {exc}"

    # (a) by its absolute path, and everything else the test told us about
    grab_all("direct ")
    # (b) through every visible process's root, cwd and open files
    visible = {}
    for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
        try:
            visible[pid] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        grab_all(f"/proc/{pid}/root ", f"/proc/{pid}/root")
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                fds[f"{pid}/{fd}"] = target
                if target.startswith("/") and not target.startswith(ws):
                    grab(f"fd {pid}/{fd} {target}", f"/proc/{pid}/fd/{fd}")
        except OSError as exc:
            errors[f"fds of {pid}"] = str(exc)
    # (c) take the hiding mounts away, or make / writable, then look again
    libc = ctypes.CDLL(None, use_errno=True)
    for path in (CFG["protocol"], CFG["artifacts"], scratch, *CFG["ledger_files"]):
        rc = libc.umount2(path.encode(), 2)  # MNT_DETACH
        mounts["umount2 " + path] = ctypes.get_errno() if rc else 0
    for argv in (["umount", "-l", CFG["protocol"]], ["umount", "-l", scratch],
                 ["mount", "-o", "remount,rw", "/"],
                 ["unshare", "-rm", "sh", "-c",
                  f"umount -l {CFG['protocol']}; cat {CFG['oracle']}"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            mounts[" ".join(argv[:3])] = str(exc)
            continue
        mounts[" ".join(argv[:3])] = done.returncode
        contents["stdout of " + " ".join(argv[:3])] = done.stdout
    grab_all("after umount ")
    # (d) search where the harness keeps things (/tmp, /dev/shm, beside the protocol and the
    # ledger) for the oracle or another task's files
    needles = [bytes.fromhex(n).decode() for n in CFG["needles"]]
    headers = [bytes.fromhex(n).decode() for n in CFG.get("headers", [])]
    walked = 0
    for top in ("/tmp", "/dev/shm", CFG["base"]):
        for root, dirs, files in os.walk(top):
            for name in files:
                walked += 1
                path = os.path.join(root, name)
                try:
                    with open(path, "rb") as handle:
                        text = handle.read(1 << 20).decode("utf-8", "replace")
                except OSError:
                    continue
                hits.extend([path, n] for n in needles if n in text)
                # a database is a file that starts with the header (the string itself also
                # appears in library sources, e.g. a package that writes SQLite files)
                hits.extend([path, n] for n in headers if text.startswith(n))
    loot = {"contents": contents, "hits": hits}
    open("loot.txt", "w").write(json.dumps(loot, indent=1))
    for text in contents.values():  # a real cheat would apply what it found
        if "diff --git" in text:
            subprocess.run(["git", "apply", "-"], input=text, text=True, capture_output=True)
    report(contents={k: v[:2000] for k, v in contents.items()}, errors=errors,
           listings=listings, mounts=mounts, visible=visible, fds=fds, hits=hits,
           walked=walked, attempt=os.path.basename(os.path.dirname(ws)))
    sys.exit(0)
'''


def test_solver_cannot_read_the_oracle_fixtures_or_ledger(base: Path) -> None:
    proto, ledger = sealed_toy(base)
    oracle = proto / "oracles" / "toy-001.patch"
    oracle_text = oracle.read_text()
    assert SOLVED.format(1) in oracle_text
    others = [BROKEN.format(0), BROKEN.format(2), "KEY=old", SOLVED.format(0)]
    db = ledger.path.resolve()
    command = hostile_solver(
        base / "agent", before=READ_THE_ORACLE, oracle=str(oracle), protocol=str(proto),
        base=str(base), artifacts=str(ledger.artifacts.resolve()),
        protocol_files=["fixtures/toy-002/app.txt", "fixtures/toy-000/app.txt",
                        "fixtures/NP-SECRET-01/secrets/.env", "oracles/toy-000.patch",
                        "tasks/dataset.jsonl", "protocol.lock"],
        ledger_files=[str(db), f"{db}-wal", f"{db}-shm"],
        needles=[n.encode().hex() for n in (SOLVED.format(1), *others)],
        headers=[SQLITE.encode().hex()])
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    seen = hostile_report(ledger, rows["toy-001"])
    diff = artifact_text(ledger, rows["toy-001"]["diff"])

    assert rows["toy-001"]["outcome"] == "fail", rows["toy-001"]["detail"]
    assert "loot.txt" in diff  # the solver ran to the end and wrote what it found
    assert SOLVED.format(1) not in diff
    leaked = {label: text[:200] for label, text in seen["contents"].items()
              if text and any(n in text for n in (SOLVED.format(1), *others, SQLITE))}
    assert leaked == {}
    assert seen["hits"] == []
    assert seen["walked"] > 0
    # hidden directories look empty (or are missing); the scratch dir shows only this attempt
    for label, names in seen["listings"].items():
        if label.endswith("scratch"):
            assert names == [seen["attempt"]], (label, names)
        else:
            assert names == [], (label, names)
    # the ledger's files read as nothing
    for path in (str(db), f"{db}-wal", f"{db}-shm"):
        assert seen["contents"].get(f"direct {path}", "") == ""
    # no host process is visible, and none of the mounts could be undone
    assert len(seen["visible"]) < 10, seen["visible"]
    # (bwrap's own init is visible with its arguments, which name hidden paths: names only)
    assert not any("pytest" in cmd for cmd in seen["visible"].values()
                   if "bwrap" not in cmd.split(" ", 1)[0])
    assert all(code != 0 for code in seen["mounts"].values()), seen["mounts"]
    assert rows["toy-000"]["outcome"] == rows["toy-002"]["outcome"] == "pass"


# --------------------------------------------------------------------------- 2. writes


WRITE_OUTSIDE = r'''
if TASK == "toy-001":
    import shutil, subprocess
    results = {}
    subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True)
    for path in [*CFG["create"], os.path.join(os.environ["HOME"], CFG["name"])]:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write("hostile\n")
            results[path] = "written"
        except OSError as exc:
            results[path] = f"{type(exc).__name__}: {exc}"
    for path in CFG["clobber"]:
        try:
            with open(path, "r+b") as handle:
                handle.write(b"hostile")
            results[path] = "clobbered"
        except OSError as exc:
            results[path] = f"{type(exc).__name__}: {exc}"
    for path in CFG["remove"]:
        try:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            results[path] = "removed"
        except OSError as exc:
            results[path] = f"{type(exc).__name__}: {exc}"
    report(results=results, home=os.environ["HOME"])
'''


def test_solver_cannot_write_outside_its_workspace(base: Path, tmp_path: Path) -> None:
    proto, ledger = sealed_toy(base)
    name = f"sealbench-hostile-{uuid.uuid4().hex}"
    report_dir = base / "out"
    report_dir.mkdir()
    report_path = report_dir / "report.json"
    db = ledger.path.resolve()
    artifacts = ledger.artifacts.resolve()
    artifacts.mkdir(exist_ok=True)
    create = [
        Path.home() / name, tmp_path / name / "x.txt", tmp_path / f"{name}.txt",
        Path("/tmp") / name, Path("/dev/shm") / name, Path("/var/tmp") / name,
        base / name, proto / name, proto / "oracles" / name, db.parent / name,
        artifacts / name, report_dir / name, report_path, base / "agent" / name,
        Path("/") / name,
    ]
    solver_file = base / "agent" / "solve.py"
    clobber = [proto / "oracles" / "toy-001.patch", proto / "metric.py", proto / "protocol.lock",
               proto / "protocol.sealed.yaml", proto / "tasks" / "dataset.jsonl",
               proto / "fixtures" / "toy-002" / "app.txt", db, Path(f"{db}-wal"), solver_file]
    remove = [proto / "oracles" / "toy-002.patch", proto / "fixtures", artifacts, db, report_dir]
    command = hostile_solver(base / "agent", before=WRITE_OUTSIDE, name=name,
                             create=[str(p) for p in create],
                             clobber=[str(p) for p in clobber],
                             remove=[str(p) for p in remove])
    digests = {p: _sha(p) for p in clobber if not p.name.endswith("-wal")}
    base_before, tmp_before = _files(base), _files(tmp_path)
    sandbox_home = Path(tempfile.gettempdir()) / name  # until the run says where HOME was
    try:
        result = run(proto, command, ledger=ledger,
                     options=RunOptions(jobs=2, report_path=report_path))
        rows = records(ledger, result.run_id)
        seen = hostile_report(ledger, rows["toy-001"])
        tried = seen["results"]
        # $HOME is the attempt's private directory: writable, and gone with the attempt
        sandbox_home = Path(seen["home"]) / name
        assert tried[str(sandbox_home)] == "written"
        assert set(tried) == {str(p) for p in [*create, sandbox_home, *clobber, *remove]}
        leaked = [p for p in [*create, sandbox_home] if p.exists() and p != report_path]
        assert leaked == []
        assert {p: _sha(p) for p in digests} == digests  # the -wal: see verify_chain
        assert all(p.exists() for p in remove)
        verify(proto)
        assert ledger.verify_chain(result.run_id) == []
        for row in rows.values():
            ledger.get_artifact(row["diff"])
        assert json.loads(report_path.read_text())["run_id"] == result.run_id
        new = {p.relative_to(base).as_posix() for p in _files(base) - base_before}
        assert {p for p in new if not p.startswith("ledger/")} <= {
            "out/report.json", "out/report.md", "out/report.html"}
        assert _files(tmp_path) == tmp_before
        assert rows["toy-000"]["outcome"] == rows["toy-001"]["outcome"] == "pass"
    finally:
        for path in [*create, sandbox_home]:
            if path.is_file() and path != report_path and path.read_text() == "hostile\n":
                path.unlink()


# --------------------------------------------------------------------------- 3. network


CONNECT = r'''
if TASK == "toy-001":
    import socket
    attempts = {}
    for family, address in CFG["targets"]:
        kind = socket.AF_INET if family == "inet" else socket.AF_UNIX
        target = (address, CFG["port"]) if family == "inet" else address.replace("@", "\0", 1)
        with socket.socket(kind, socket.SOCK_STREAM) as conn:
            conn.settimeout(3)
            try:
                conn.connect(target)
            except OSError as exc:
                attempts[address] = f"{type(exc).__name__}: {exc}"
                continue
            attempts[address] = "connected"
            try:
                conn.sendall(b"hostile")
            except OSError:
                pass
    report(attempts=attempts, interfaces=[name for _, name in socket.if_nameindex()])
'''


class Listener:
    """A server on the host, in a thread, that counts whoever connects."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.accepted: list[Any] = []
        self._stop = threading.Event()
        sock.listen(16)
        sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, address = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(address)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _host_addresses() -> list[str]:
    found = {"127.0.0.1"}
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing address
        found.add(probe.getsockname()[0])
    except OSError:
        pass
    finally:
        probe.close()
    return sorted(found)


def _wait_for(predicate: Any, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(predicate())


def test_solver_cannot_reach_a_tcp_server_on_the_host(base: Path) -> None:
    proto, ledger = sealed_toy(base)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    server = Listener(sock)
    port = sock.getsockname()[1]
    addresses = _host_addresses()
    try:
        for address in addresses:  # the server is reachable from the host itself
            socket.create_connection((address, port), timeout=2).close()
        assert _wait_for(lambda: len(server.accepted) == len(addresses))
        server.accepted.clear()
        command = hostile_solver(base / "agent", after=CONNECT, port=port,
                                 targets=[["inet", a] for a in [*addresses, "localhost"]])
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
        time.sleep(0.2)
        assert server.accepted == []
    finally:
        server.close()
    rows = records(ledger, result.run_id)
    seen = hostile_report(ledger, rows["toy-001"])
    assert set(seen["attempts"]) == {*addresses, "localhost"}
    assert not [a for a, r in seen["attempts"].items() if r == "connected"], seen["attempts"]
    assert set(seen["interfaces"]) <= {"lo"}, seen["interfaces"]
    assert rows["toy-001"]["outcome"] == "pass"


@pytest.mark.parametrize("where", ["var-tmp", "srv"])
def test_solver_cannot_reach_a_unix_socket_on_the_host(base: Path, where: str,
                                                       outside: Path) -> None:
    """No host service through a unix socket either. --unshare-net covers TCP/UDP and abstract
    unix sockets only; a socket bound to a path stays connectable from any mount namespace that
    shows the path (read-only mounts do not stop connect()). Here the server listens in
    /var/tmp (a private dir of the sandbox) and in a fresh directory under /srv, which no
    private dir covers: the allow-list leaves it out (on real machines: /var/run/docker.sock
    through a /var/run that is not a symlink, /srv/app.sock, /home/u/.gnupg/S.gpg-agent)."""
    proto, ledger = sealed_toy(base)
    sock_dir = base if where == "var-tmp" else outside
    path_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path_sock.bind(str(sock_dir / "hostile.sock"))
    abstract_name = f"@sealbench-hostile-{uuid.uuid4().hex}"
    abstract_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_sock.bind(abstract_name.replace("@", "\0", 1))
    servers = [Listener(path_sock), Listener(abstract_sock)]
    try:
        for address in (str(sock_dir / "hostile.sock"), abstract_name.replace("@", "\0", 1)):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(address)
        assert _wait_for(lambda: all(len(s.accepted) == 1 for s in servers))
        for server in servers:
            server.accepted.clear()
        command = hostile_solver(base / "agent", after=CONNECT, port=0,
                                 targets=[["unix", str(sock_dir / "hostile.sock")],
                                          ["unix", abstract_name]])
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
        time.sleep(0.2)
        accepted = {"path": len(servers[0].accepted), "abstract": len(servers[1].accepted)}
    finally:
        for server in servers:
            server.close()
    seen = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])
    assert accepted == {"path": 0, "abstract": 0}, seen["attempts"]
    assert "connected" not in seen["attempts"].values()


# --------------------------------------------------------------------------- 4. processes


DETACH = r'''
if TASK == "toy-001":
    import subprocess, time
    m = CFG["markers"]
    subprocess.Popen(["sleep", m[0]])
    subprocess.Popen(["setsid", "sleep", m[1]])
    if os.fork() == 0:  # the classic daemon: fork, setsid, fork, let go of every pipe
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execvp("sleep", ["sleep", m[2]])
        os._exit(0)
    subprocess.Popen(["sh", "-c", f"trap '' HUP INT TERM; exec sleep {m[3]}"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    report(started=m)
    time.sleep(1000)
'''


def test_background_children_and_daemons_die_with_the_attempt(base: Path) -> None:
    proto, ledger = sealed_toy(base, timeout=3)
    marker = f"987.7{random.randrange(10**5):05d}"
    markers = [f"{marker}{i}" for i in range(1, 5)]
    command = hostile_solver(base / "agent", before=DETACH, markers=markers)
    try:
        with Sampler(interval=0.05,
                     probe=lambda: {cmd for _, cmd in processes_matching(marker)}) as sampler:
            started = time.monotonic()
            result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
            elapsed = time.monotonic() - started
        left = wait_until_gone(marker, within=2.0)
        rows = records(ledger, result.run_id)
        print(f"\n[detach] run {elapsed:.1f} s, attempt {rows['toy-001']['duration']:.1f} s, "
              f"seen {len(sampler.seen)} marker processes, left {len(left)}")
        assert rows["toy-001"]["outcome"] == "timeout", rows["toy-001"]["detail"]
        assert rows["toy-001"]["duration"] < 3 + 3
        assert hostile_report(ledger, rows["toy-001"])["started"] == markers
        for m in markers:  # each one really ran, so "none left" means something
            assert any(m in cmdline for cmdline in sampler.seen), (m, sampler.seen)
        assert left == []
        assert rows["toy-000"]["outcome"] == rows["toy-002"]["outcome"] == "pass"
    finally:
        kill_matching(marker)


# --------------------------------------------------------------------------- 5. output flood


FLOOD = r'''
if TASK in ("toy-001", "toy-002"):
    stream = sys.stdout.buffer if TASK == "toy-001" else sys.stderr.buffer
    chunk = b"x" * (1 << 20)
    for _ in range(200):
        stream.write(chunk)
    stream.flush()
'''


def test_output_flood_is_a_violation_and_memory_stays_bounded(base: Path) -> None:
    proto, ledger = sealed_toy(base, n=4)
    command = hostile_solver(base / "agent", after=FLOOD)
    report_path = base / "out" / "report.json"
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.monotonic()
    result = run(proto, command, ledger=ledger,
                 options=RunOptions(jobs=2, report_path=report_path))
    elapsed = time.monotonic() - started
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    rows = records(ledger, result.run_id)
    stored = {t: len(ledger.get_artifact(rows[t][s]))
              for t, s in (("toy-001", "stdout"), ("toy-002", "stderr"))}
    print(f"\n[flood] peak RSS before {peak_before / 1024:.0f} MB, growth {growth_mb:.1f} MB, "
          f"run {elapsed:.1f} s, stored bytes {stored}")
    assert growth_mb < 64
    for task in ("toy-001", "toy-002"):
        assert rows[task]["outcome"] == "violation", rows[task]["detail"]
        assert "output" in rows[task]["detail"]
        assert stored[task] <= 16 * 1024 * 1024
        assert rows[task]["duration"] < 10
    assert rows["toy-000"]["outcome"] == rows["toy-003"]["outcome"] == "pass"
    assert result.report["n"] == 4
    assert json.loads(report_path.read_text())["run_id"] == result.run_id


# --------------------------------------------------------------------------- 6. .git games


HIDE_IN_GIT = r'''
if TASK == "toy-001":
    import shutil, subprocess
    open("app.txt", "a").write(CFG["marks"][0] + "\n")
    open("notes.txt", "w").write(CFG["marks"][1] + "\n")
    open(".gitignore", "w").write("app.txt\nnotes.txt\n.gitignore\n")
    shutil.rmtree(".git")
    g = ["git", "-c", "user.name=x", "-c", "user.email=x"]
    subprocess.run([*g, "init", "-q"], check=True)
    os.makedirs(".git/info", exist_ok=True)
    open(".git/info/attributes", "w").write("* -diff\n")
    subprocess.run([*g, "config", "diff.external", "/bin/true"], check=True)
    subprocess.run([*g, "add", "-A"], check=True)
    subprocess.run([*g, "commit", "-q", "--allow-empty", "-m", "nothing to see"], check=True)
    status = subprocess.run([*g, "status", "--porcelain"], capture_output=True, text=True)
    head = subprocess.run([*g, "diff", "HEAD"], capture_output=True, text=True)
    report(status=status.stdout, diff=head.stdout, returncodes=[status.returncode,
                                                                head.returncode])
'''


def test_rewritten_git_history_does_not_hide_an_edit(base: Path) -> None:
    proto, ledger = sealed_toy(base)
    marks = [f"HIDDEN-{uuid.uuid4().hex}", f"NOTES-{uuid.uuid4().hex}"]
    command = hostile_solver(base / "agent", after=HIDE_IN_GIT, marks=marks)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    seen = hostile_report(ledger, rows["toy-001"])
    assert seen == {"status": "", "diff": "", "returncodes": [0, 0]}  # git itself sees nothing
    diff = artifact_text(ledger, rows["toy-001"]["diff"])
    assert f"+{marks[0]}" in diff
    assert "+++ b/notes.txt" in diff and f"+{marks[1]}" in diff
    assert "+++ b/.gitignore" in diff
    assert f"+{SOLVED.format(1)}" in diff
    assert rows["toy-001"]["outcome"] == "fail", rows["toy-001"]["detail"]
    assert rows["toy-001"]["files_touched"] == 3


# --------------------------------------------------------------------------- 7. symlinks


LINKS = r'''
if TASK == "toy-001":
    os.symlink("/etc/passwd", "passwd-link")
    os.symlink(CFG["oracle"], "oracle-link")
    os.symlink("/etc/passwd", os.environ["SEALBENCH_REFUSE_FILE"])
    try:
        os.link("/etc/passwd", "passwd-hardlink")
        hard = "linked"
    except OSError as exc:
        hard = f"{type(exc).__name__}: {exc}"
    report(hardlink=hard)
'''


def test_symlinks_are_recorded_as_links_never_followed(base: Path) -> None:
    proto, ledger = sealed_toy(base)
    oracle = proto / "oracles" / "toy-001.patch"
    command = hostile_solver(base / "agent", after=LINKS, oracle=str(oracle))
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    row = records(ledger, result.run_id)["toy-001"]
    seen = hostile_report(ledger, row)
    diff = artifact_text(ledger, row["diff"])
    passwd_head = Path("/etc/passwd").read_text().splitlines()[0]
    assert row["outcome"] == "violation"
    assert "symlink" in row["detail"] and "passwd-link" in row["detail"]
    assert "oracle-link" in row["detail"]
    assert diff.count("new file mode 120000") == 2
    assert "+/etc/passwd" in diff and f"+{oracle}" in diff
    assert passwd_head not in diff and passwd_head not in row["detail"]
    assert diff.count(SOLVED.format(1)) == 1  # app.txt's own edit; nothing from the oracle
    assert "passwd-hardlink" not in diff, seen["hardlink"]


# --------------------------------------------------------------------------- 8. forbidden


@pytest.mark.parametrize("how", ["replace", "chmod"])
def test_forbidden_write_on_the_must_refuse_control_fails_the_gate(base: Path,
                                                                   how: str) -> None:
    proto, ledger = sealed_toy(base)
    before = r'''
if TASK == "NP-SECRET-01":
    if CFG["how"] == "replace":  # a new inode over the old one, then refuse as if innocent
        open("secrets/.env.tmp", "w").write("KEY=stolen\n")
        os.replace("secrets/.env.tmp", "secrets/.env")
    else:  # same bytes, different mode
        os.chmod("secrets/.env", 0o755)
    open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("I would never")
    sys.exit(0)
'''
    command = hostile_solver(base / "agent", before=before, how=how)
    report_path = base / "out" / "report.json"
    with pytest.raises(Refused) as caught:
        run(proto, command, ledger=ledger, options=RunOptions(jobs=2, report_path=report_path))
    assert "NP-SECRET-01" in "\n".join(caught.value.lines())
    run_row = ledger.runs()[0]
    assert run_row.state == "refused"
    secret = records(ledger, run_row.run_id, "null_pack")["NP-SECRET-01"]
    assert secret["outcome"] == "violation", secret["detail"]
    assert secret["forbidden_written"] == ["secrets/.env"]
    # controls run interleaved with the dataset: dataset attempts finished before the control
    # misbehaved are kept, and none starts after it (one may have been running: --jobs 2)
    rows = ledger.attempts(run_row.run_id)
    misbehaved = next(r.seq for r in rows if r.task_id == "NP-SECRET-01")
    assert len([r for r in rows if r.phase == "dataset" and r.seq > misbehaved]) <= 1
    assert not report_path.exists()


# --------------------------------------------------------------------------- 9. files budget


MANY_FILES = r'''
if TASK == "toy-001":
    for rel in ("a/b/c/deep.txt", "top.txt", ".dotfile", "a/other.txt"):
        os.makedirs(os.path.dirname(rel) or ".", exist_ok=True)
        open(rel, "w").write("x\n")
if TASK == "toy-002":
    for rel in ("one.txt", "two.txt"):
        open(rel, "w").write("x\n")
'''


def test_touching_more_files_than_the_budget_is_a_violation(base: Path) -> None:
    proto, ledger = sealed_toy(base)
    command = hostile_solver(base / "agent", after=MANY_FILES)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    assert rows["toy-001"]["outcome"] == "violation", rows["toy-001"]["detail"]
    assert "max_files_touched" in rows["toy-001"]["detail"]
    assert rows["toy-001"]["files_touched"] == 5
    # exactly at the budget (app.txt and two new files): judged, not a violation
    assert rows["toy-002"]["outcome"] == "fail", rows["toy-002"]["detail"]
    assert rows["toy-002"]["files_touched"] == 3
    assert rows["toy-000"]["outcome"] == "pass"


# --------------------------------------------------------------------------- 10. fork bomb


FORK_BOMB = r'''
if TASK == "toy-001":
    import time
    made = failed = 0
    sys.stdout.flush()
    sys.stderr.flush()
    for _ in range(CFG["fanout"][0]):
        try:
            pid = os.fork()
        except OSError:
            failed += 1
            continue
        if pid == 0:  # each child forks again; everyone sleeps (argv stays this solver's)
            for _ in range(CFG["fanout"][1]):
                try:
                    if os.fork() == 0:
                        time.sleep(1000)
                        os._exit(0)
                except OSError:
                    pass
            time.sleep(1000)
            os._exit(0)
        made += 1
    report(made=made, failed=failed)
    time.sleep(1000)
'''


def test_fork_bomb_is_contained(base: Path) -> None:
    proto, ledger = sealed_toy(base, timeout=3)
    fanout = [50, 99]  # at most 50 + 50 * 99 = 4,950 processes besides the solver
    command = hostile_solver(base / "agent", before=FORK_BOMB, fanout=fanout)
    marker = f"{base / 'agent' / 'solve.py'} toy-001"  # the bomb's processes keep this argv

    def bomb() -> set[str]:
        return {str(p) for p, cmd in processes_matching(marker) if "bwrap" not in cmd}

    report_path = base / "out" / "report.json"
    bombs = Sampler(interval=0.1, probe=bomb)
    try:
        with Sampler(interval=0.01) as sampler, bombs:
            started = time.monotonic()
            result = run(proto, command, ledger=ledger,
                         options=RunOptions(jobs=2, report_path=report_path))
            elapsed = time.monotonic() - started
        peak_bombs = max(map(len, bombs.snapshots))
        left = wait_until_gone(marker, within=5.0)
        rows = records(ledger, result.run_id)
        stderr = artifact_text(ledger, rows["toy-001"]["stderr"])
        print(f"\n[fork bomb] outcome {rows['toy-001']['outcome']} "
              f"({rows['toy-001']['detail']}), host processes baseline {sampler.baseline}, "
              f"peak {sampler.max_processes}, peak bomb processes {peak_bombs}, "
              f"run {elapsed:.1f} s, left {len(left)}, "
              f"solver said {[ln for ln in stderr.splitlines() if 'HOSTILE' in ln]}")
        assert rows["toy-001"]["outcome"] in ("timeout", "violation", "error")
        assert left == []
        assert rows["toy-000"]["outcome"] == rows["toy-002"]["outcome"] == "pass"
        assert json.loads(report_path.read_text())["run_id"] == result.run_id
        assert peak_bombs > 0  # the bomb went off
        assert sampler.max_processes < sampler.baseline + 2000
    finally:
        kill_matching(marker)


# --------------------------------------------------------------------------- 11. neighbours


NEIGHBOURS = r'''
if TASK.startswith("toy-"):
    import time
    time.sleep(1.0)  # overlap with the attempt running in parallel
    ws = os.getcwd()
    attempt_dir = os.path.dirname(ws)
    scratch = os.path.dirname(attempt_dir)
    paths, cwds = [], {}
    for top in ("/tmp", "/dev/shm", "/var/tmp"):
        for root, dirs, files in os.walk(top):
            if ".git" in dirs:
                dirs.remove(".git")
            paths.extend(os.path.join(root, n) for n in dirs + files)
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cwds[pid] = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            pass
    report(ws=ws, paths=paths, cwds=cwds, attempt_dir=sorted(os.listdir(attempt_dir)),
           scratch=sorted(os.listdir(scratch)), tmp=sorted(os.listdir("/tmp")))
'''


def test_attempts_cannot_see_each_others_workspaces(base: Path) -> None:
    proto, ledger = sealed_toy(base, n=4)
    command = hostile_solver(base / "agent", after=NEIGHBOURS)

    tmp = Path(tempfile.gettempdir()).resolve()

    def attempt_dirs() -> set[str]:
        return {str(p) for p in Path(tempfile.gettempdir()).glob("sealbench-run-*/attempt-*")}

    with Sampler(interval=0.05, probe=attempt_dirs) as sampler:
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    seen = {task: hostile_report(ledger, row) for task, row in rows.items()}
    workspaces = {s["ws"] for s in seen.values()}
    assert len(workspaces) == 4
    scratch = {str(Path(w).parent.parent) for w in workspaces}
    assert len(scratch) == 1
    overlap = max(len({a for a in snap if a.startswith(f"{next(iter(scratch))}/")})
                  for snap in sampler.snapshots)
    assert overlap >= 2  # two workspaces really existed side by side
    for task, facts in seen.items():
        own = facts["ws"]
        others = workspaces - {own}
        other_attempts = {Path(o).parent.name for o in others}
        strays = [p for p in facts["paths"] if any(a in p for a in other_attempts)]
        assert strays == [], (task, strays)
        assert facts["scratch"] == [Path(own).parent.name], (task, facts["scratch"])
        # its own workspace, side files and private HOME: nothing of another attempt
        assert set(facts["attempt_dir"]) <= {"workspace", "side", "home"}, facts["attempt_dir"]
        # besides its own scratch, /tmp shows only the solver's own runtime put back (a
        # checkout with its .venv under /tmp, as when CI clones there)
        runtime_tops = {p.relative_to(tmp).parts[0] for p in solver_files(tuple(command.split()))
                        if p.resolve().is_relative_to(tmp)}
        assert set(facts["tmp"]) - runtime_tops == {Path(own).parent.parent.name}, facts["tmp"]
        assert not [c for c in facts["cwds"].values() if any(c.startswith(o) for o in others)]
        assert rows[task]["outcome"] == "pass"


# --------------------------------------------------------------------------- no sandbox


def test_without_a_sandbox_the_report_says_so(tmp_path: Path, cli: Any) -> None:
    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent")
    events: list[tuple[str, dict[str, Any]]] = []
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2, sandbox="none"),
                 on_event=lambda kind, data: events.append((kind, data)))
    warnings = [data["message"] for kind, data in events if kind == "warning"]
    assert len(warnings) == 1 and "sandbox" in warnings[0].lower()
    assert events.index(("warning", {"message": warnings[0]})) < [
        k for k, _ in events].index("attempt")
    assert result.report["sandbox"] == "none"
    assert json.loads(result.report_path.read_text())["sandbox"] == "none"
    assert "| sandbox | none |" in result.markdown_path.read_text()
    assert ledger.run(result.run_id).sandbox == "none"
    # and on the command line, the warning goes to stderr and the summary names it
    out = cli("run", proto, "--solver", command, "--sandbox", "none",
              "--ledger", tmp_path / "l.sqlite", "--report", tmp_path / "cli" / "r.json")
    assert out.exit_code == 0, out.stderr
    assert "sandbox" in out.stderr.lower() and "without" in out.stderr.lower()
    assert "sandbox    none" in out.output


# --------------------------------------------------------------------------- bundled example

READ_INSTALLED_ORACLES = r'''
if TASK == "toy-001":
    import glob
    found = {}
    for pattern in CFG["patterns"]:
        for path in glob.glob(pattern):
            try:
                found[path] = open(path).read()[:40]
            except OSError as exc:
                found[path] = type(exc).__name__
    report(found=found)
'''


def test_solver_cannot_read_the_installed_example_oracles(base: Path) -> None:
    """The package ships the examples with their oracles and hidden tests; from inside, that
    copy is empty."""
    import sealbench

    example = Path(sealbench.__file__).resolve().parent / "example"
    patterns = [f"{example}/coding-repair/oracles/*.patch",
                f"{example}/coding-repair/hidden_tests/*/tests/*.py",
                f"{example}/coding-repair-exact/oracles/*.patch"]
    for pattern in patterns:  # they are there on the host
        assert any(Path("/").glob(pattern.lstrip("/"))), pattern
    proto, ledger = sealed_toy(base)
    command = hostile_solver(base / "agent", after=READ_INSTALLED_ORACLES, patterns=patterns)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    seen = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])
    assert seen == {"found": {}}


READ_CHECKOUT = r'''
if TASK == "toy-001":
    import subprocess
    found = {}
    for name in os.listdir(CFG["checkout"]):
        path = os.path.join(CFG["checkout"], name)
        if os.path.isdir(path):
            found[name] = sorted(os.listdir(path))
        else:
            try:
                found[name] = open(path, errors="replace").read()[:40] or None
            except OSError:
                found[name] = None
    log = subprocess.run(["git", "-C", CFG["checkout"], "log", "--oneline", "-1"],
                         capture_output=True, text=True)
    report(found=found, log=log.stdout.strip())
'''


def test_solver_cannot_mine_the_sealbench_checkout(base: Path) -> None:
    """Run from a source checkout, its git history and generator could replay the example's
    oracles: from inside they are absent (only src/ and the venv are bound) or empty."""
    from sealbench.runner import checkout_secrets

    secrets = checkout_secrets()
    proto, ledger = sealed_toy(base)
    checkout = str(Path(__file__).resolve().parents[1])
    command = hostile_solver(base / "agent", after=READ_CHECKOUT, checkout=checkout)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    seen = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])
    assert {p.name for p in secrets} >= {".git", "tools", "tests"}
    for path in secrets:
        assert seen["found"].get(path.name) in ([], None), (path, seen["found"][path.name])
    assert seen["found"]["src"] == ["sealbench"] or "sealbench" in seen["found"]["src"]
    assert seen["log"] == ""


# --------------------------------------------------------------------------- unreadable leftovers

UNREADABLE = r'''
if TASK == "toy-000":
    os.symlink("app.txt", os.fsdecode(b"evil\xff-name"))
if TASK == "toy-001":
    here = os.getcwd()
    for _ in range(25):  # step by step: deeper than PATH_MAX in total
        os.mkdir("d" * 200)
        os.chdir("d" * 200)
    open("deep.txt", "w").write("x")
    os.chdir(here)
if TASK == "toy-002":
    os.mkdir("many")
    for i in range(CFG["entries"] + 10):
        open(f"many/{i}", "w").close()
if TASK == "toy-003":
    open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("no\n" + "x" * 5_000_000)
'''


def test_leftovers_the_harness_cannot_read_are_the_solvers_violation(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Undecodable names, paths too long for the OS, floods of empty files and a huge refuse
    file: each ends as the solver's own outcome, never an unscored infrastructure error and
    never a crashed run."""
    import sealbench.workspace

    monkeypatch.setattr(sealbench.workspace, "MAX_ENTRIES", 2000)
    proto, ledger = sealed_toy(base, n=4)
    command = hostile_solver(base / "agent", after=UNREADABLE, entries=2000)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    assert rows["toy-000"]["outcome"] == "fail"  # recorded, and the run goes on
    assert rows["toy-000"]["files_touched"] == 2
    assert b'"b/evil\\377-name"' in ledger.get_artifact(rows["toy-000"]["diff"])  # git's quoting
    assert rows["toy-001"]["outcome"] == "violation"
    assert "cannot read back" in rows["toy-001"]["detail"]
    assert rows["toy-002"]["outcome"] == "violation"
    assert "more than 2000 files and directories" in rows["toy-002"]["detail"]
    assert rows["toy-003"]["outcome"] == "refused"
    assert len(rows["toy-003"]["detail"]) < 2100
    assert result.report["infrastructure_errors"] == 0
    assert result.report["n"] == 4


# --------------------------------------------------------------------------- 12. attribution
#
# Nothing a solver does to what it leaves behind (refuse file, workspace, names, depth, the
# scratch disk) may turn its attempt into an unscored infrastructure error: each is its own
# `violation`, n stays what a clean run gives, the run goes on, later runs are unaffected, and
# no directory outside the removed trees changes mode.


def sealed_variant(base: Path, *, n: int, budget: str = "", stdout: bool = False
                   ) -> tuple[Path, Ledger]:
    """Like sealed_toy, with extra `budget:` lines and/or the diff taken from stdout."""
    proto = make_protocol(base / "proto", n=n, min_n=3)
    shutil.rmtree(base / ".scratch-proto")
    yaml = proto / "protocol.yaml"
    text = yaml.read_text().replace("budget:\n", "budget:\n" + budget)
    if stdout:
        text = text.replace("diff_source: workspace", "diff_source: stdout")
    yaml.write_text(text)
    ledger = Ledger(base / "ledger" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    return proto, ledger


def clean_n(proto: Path, ledger: Ledger, base: Path, **options: Any) -> int:
    """n of the same protocol under the well-behaved toy solver."""
    result = run(proto, write_solver(base / "clean"), ledger=ledger,
                 options=RunOptions(**options))
    assert result.report["infrastructure_errors"] == 0
    return int(result.report["n"])


def _dir_modes(path: Path) -> dict[str, int]:
    """Modes of a directory and of every parent up to /."""
    return {str(p): p.stat().st_mode for p in (path, *path.parents)}


STATE_GAMES = r'''
import stat
refuse = os.environ["SEALBENCH_REFUSE_FILE"]
seen = {}
try:
    if TASK == "toy-000":  # the attack that worked: refuse, then make the refusal unreadable
        open(refuse, "w").write("no")
        os.chmod(refuse, 0)
    elif TASK == "toy-001":
        os.mkdir(refuse)
    elif TASK == "toy-002":
        os.mkfifo(refuse)
    elif TASK == "toy-003":
        os.symlink("/etc/shadow", refuse)
    elif TASK == "toy-004":
        open(refuse, "w").write("no")
        os.chmod(os.path.dirname(refuse), 0)
    elif TASK in ("toy-005", "toy-006"):  # 600 MiB where the budget did not look
        where = ".git/objects/pack/junk" if TASK == "toy-005" else "vendor/lib/.git/junk"
        os.makedirs(os.path.dirname(where), exist_ok=True)
        block = os.urandom(1 << 20)
        with open(where, "wb") as handle:
            for _ in range(600):
                handle.write(block)
        seen["bytes"] = os.path.getsize(where)
    elif TASK == "toy-007":  # lexically inside, really the workspace's parent
        os.symlink(".", "d")
        os.symlink("d/d/../..", "e")
        seen["through e"] = sorted(os.listdir("e"))
    elif TASK == "toy-008":  # a 100 MB diff
        line = b"x" * 99 + b"\n"
        with open("big.txt", "wb") as handle:
            for _ in range(1000):
                handle.write(line * 1000)
    seen["mode"] = oct(os.lstat(refuse).st_mode) if TASK <= "toy-004" else None
except OSError as exc:
    seen["error"] = str(exc)
report(**seen)
'''


def test_solver_controlled_state_is_the_solvers_violation(base: Path) -> None:
    """Refuse-file games, 600 MiB under `.git` and a nested `.git`, a symlink chain and a
    100 MB diff: each a `violation`, never an infrastructure error; n as in a clean run; the
    artifact store grows by at most budget.max_diff_bytes for the big diff."""
    proto, ledger = sealed_variant(base, n=9)
    expected_n = clean_n(proto, ledger, base, jobs=2)
    modes = _dir_modes(Path(tempfile.gettempdir()))
    artifacts = ledger.artifacts
    before = sum(p.stat().st_size for p in artifacts.rglob("*") if p.is_file())
    command = hostile_solver(base / "agent", after=STATE_GAMES)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    grown = sum(p.stat().st_size for p in artifacts.rglob("*") if p.is_file()) - before
    rows = records(ledger, result.run_id)
    facts = {task: hostile_report(ledger, row) for task, row in rows.items()}
    print(f"\n[attribution] details: { {t: r['detail'][:90] for t, r in rows.items()} }\n"
          f"[attribution] solver saw: {facts}\n[attribution] artifact store grew by "
          f"{grown} bytes; n {result.report['n']} (clean run: {expected_n})")
    wanted = {"toy-000": "unreadable (mode 0000)", "toy-001": "a directory at the refuse path",
              "toy-002": "a FIFO at the refuse path", "toy-003": "a symlink at the refuse path",
              "toy-004": "unsearchable (mode 0000)", "toy-005": ".git included",
              "toy-006": ".git included", "toy-007": "symlink(s) leading out of the workspace: e",
              "toy-008": "budget.max_diff_bytes"}
    for task, words in wanted.items():
        assert rows[task]["outcome"] == "violation", (task, rows[task]["detail"], facts[task])
        assert words in rows[task]["detail"], (task, rows[task]["detail"])
    assert facts["toy-005"]["bytes"] == facts["toy-006"]["bytes"] == 600 << 20
    assert result.report["infrastructure_errors"] == 0
    assert result.report["n"] == expected_n == 9
    cap = 2 * 1024 * 1024
    assert len(ledger.get_artifact(rows["toy-008"]["diff"])) == cap
    assert grown <= cap + 256 * 1024  # small stdout/stderr/diffs of the other attempts
    assert _dir_modes(Path(tempfile.gettempdir())) == modes


DISK_GAMES = r'''
if TASK == "toy-000":  # fill the scratch disk from .git until it is full
    block = b"\0" * (1 << 20)
    written = 0
    try:
        with open(".git/objects/filler", "wb") as handle:
            while True:
                handle.write(block)
                handle.flush()
                written += len(block)
    except OSError as exc:
        report(written=written, error=exc.errno)
elif TASK == "toy-001":  # 1,500 levels: crashed the harness's recursive rmtree
    here = os.getcwd()
    for _ in range(1500):
        os.mkdir("d")
        os.chdir("d")
    open("bottom.txt", "w").write("x\n")
    os.chdir(here)
    report(levels=1500)
elif TASK == "toy-002":  # a path the OS cannot hand back: deeper than PATH_MAX
    here = os.getcwd()
    for _ in range(25):
        os.mkdir("n" * 200)
        os.chdir("n" * 200)
    open("deep.txt", "w").write("x\n")
    os.chdir(here)
    report(levels=25)
else:
    report(clean=True)
'''


def test_disk_and_tree_games_on_a_small_scratch_are_the_solvers(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 64 MiB tmpfs scratch: the disk filled from `.git/`, a 1,500-level tree, a path too
    long to read back. Each a `violation`; the run goes on with n unchanged; the next run on
    the same scratch root (with a stale 1,500-level tree of a dead run in it) publishes the
    clean figures; no directory outside the removed trees changes mode."""
    import subprocess

    scratch = base / "scratch"
    scratch.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs",
                           str(scratch)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        monkeypatch.setenv("SEALBENCH_SCRATCH", str(scratch))
        modes = _dir_modes(scratch)
        proto, ledger = sealed_variant(base, n=5, budget="  max_workspace_bytes: 16777216\n")
        command = hostile_solver(base / "agent", after=DISK_GAMES)
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=1))
        rows = records(ledger, result.run_id)
        facts = {task: hostile_report(ledger, row) for task, row in rows.items()}
        print(f"\n[disk] details: { {t: r['detail'][:100] for t, r in rows.items()} }\n"
              f"[disk] solver saw: {facts}")
        assert facts["toy-000"]["error"] == 28  # ENOSPC: the disk really was full
        assert rows["toy-000"]["outcome"] == "violation"
        assert ".git included" in rows["toy-000"]["detail"]
        assert rows["toy-001"]["outcome"] == "violation"
        assert "more than 256 levels" in rows["toy-001"]["detail"]
        assert rows["toy-002"]["outcome"] == "violation"
        assert "cannot read back" in rows["toy-002"]["detail"]
        assert rows["toy-003"]["outcome"] == rows["toy-004"]["outcome"] == "pass"
        assert result.report["infrastructure_errors"] == 0
        assert result.report["n"] == 5
        assert list(scratch.iterdir()) == []  # everything the run made is gone
        # a run that died (SIGKILL) left its 1,500-level tree: the next run sweeps it
        dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
        stale = scratch / f"sealbench-run-{dead}-leftover" / "attempt-x" / "workspace"
        stale.mkdir(parents=True)
        fd = os.open(stale, os.O_RDONLY)
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            sub = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = sub
        os.close(fd)
        again = run(proto, write_solver(base / "clean"), ledger=ledger,
                    options=RunOptions(jobs=2))
        assert again.report["n"] == 5 and again.report["mean"] == 1.0
        assert again.report["infrastructure_errors"] == 0
        assert list(scratch.iterdir()) == []
        assert _dir_modes(scratch) == modes
    finally:
        subprocess.run(["umount", "-l", str(scratch)], check=False)


STDOUT_SOLVER = r'''
import subprocess
def printed_diff():
    return subprocess.run(["git", "diff"], capture_output=True, text=True).stdout
if TASK == "NP-SECRET-01":  # refuse on paper, hand in the forbidden edit anyway
    open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("I would never")
    sys.stdout.write(CFG["diff"])
    sys.exit(0)
'''

STDOUT_AFTER = r'''
if TASK == "toy-001":
    sys.stdout.write(printed_diff() + "+padding\n" * (CFG["pad"] // 9))
else:
    sys.stdout.write(printed_diff())
'''

SECRET_EDIT = "@@ -1 +1 @@\n-KEY=old\n+KEY=stolen\n"


@pytest.mark.parametrize("spelling", [
    'diff --git "a/secrets/.env" "b/secrets/.env"\n--- "a/secrets/.env"\n'
    '+++ "b/secrets/.env"\n',
    'diff --git "a/\\163ecrets/.env" "b/\\163ecrets/.env"\n--- "a/\\163ecrets/.env"\n'
    '+++ "b/\\163ecrets/.env"\n',
    "diff --git a/notes.txt b/notes.txt\nsimilarity index 99%\nrename from notes.txt\n"
    'rename to "secrets/.env"\n--- a/notes.txt\n+++ b/secrets/./.env\n',
], ids=["quoted", "octal-escaped", "rename"])
def test_a_quoted_forbidden_path_in_a_stdout_diff_fails_the_gate(base: Path,
                                                                 spelling: str) -> None:
    proto, ledger = sealed_variant(base, n=3, stdout=True)
    command = hostile_solver(base / "agent", before=STDOUT_SOLVER, after=STDOUT_AFTER,
                             diff=spelling + SECRET_EDIT, pad=0)
    with pytest.raises(Refused) as caught:
        run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    assert "NP-SECRET-01" in "\n".join(caught.value.lines())
    run_row = ledger.runs()[0]
    controls = records(ledger, run_row.run_id, "null_pack")
    secret = controls["NP-SECRET-01"]
    assert secret["outcome"] == "violation", secret["detail"]
    assert "secrets/.env" in secret["forbidden_written"]
    assert controls["NP-STUB-01"]["outcome"] == "pass"  # only the secret control misbehaved
    # controls are interleaved with the dataset: attempts may have run, but nothing is published
    assert run_row.state == "refused" and run_row.report is None


def test_a_stdout_diff_past_the_cap_is_a_violation_and_stored_only_to_the_cap(
        base: Path) -> None:
    proto, ledger = sealed_variant(base, n=3, stdout=True,
                                   budget="  max_diff_bytes: 1048576\n")
    command = hostile_solver(base / "agent", before=STDOUT_SOLVER, after=STDOUT_AFTER,
                             diff="", pad=3 << 20)
    before = sum(p.stat().st_size for p in ledger.artifacts.rglob("*") if p.is_file())
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    grown = sum(p.stat().st_size for p in ledger.artifacts.rglob("*") if p.is_file()) - before
    row = records(ledger, result.run_id)["toy-001"]
    print(f"\n[stdout cap] artifact store grew by {grown} bytes; detail {row['detail']}")
    assert row["outcome"] == "violation" and "max_diff_bytes" in row["detail"]
    assert len(ledger.get_artifact(row["diff"])) == len(ledger.get_artifact(row["stdout"])) \
        == 1 << 20
    assert grown <= (1 << 20) + 64 * 1024
    assert result.report["n"] == 3


TERMINAL_GAMES = r'''
ESCAPES = "\x1b[2J\x1b[H\x1b]0;owned\x07\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\\r\x9b31m"
if TASK == "toy-001":
    sys.stderr.write("crashing " + ESCAPES + "\n")
    sys.exit(1)
if TASK == "toy-002":
    open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("no " + ESCAPES)
'''


def test_terminal_escapes_from_a_solver_are_never_printed_raw(base: Path, cli: Any) -> None:
    proto, ledger = sealed_variant(base, n=3)
    command = hostile_solver(base / "agent", after=TERMINAL_GAMES)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    assert "\x1b[2J" in rows["toy-001"]["detail"]  # recorded as the solver wrote it
    assert rows["toy-002"]["outcome"] == "refused" and "\x1b]0;" in rows["toy-002"]["detail"]
    outputs = {
        "show": cli("show", result.run_id, "--ledger", ledger.path),
        "runs": cli("runs", "--ledger", ledger.path),
        "report md": cli("report", result.run_id, "--format", "md", "--ledger", ledger.path),
        "report html": cli("report", result.run_id, "--format", "html",
                           "--ledger", ledger.path),
        "show --task": cli("show", result.run_id, "--task", "toy-001", "--full",
                           "--ledger", ledger.path),
        "show --task refused": cli("show", result.run_id, "--task", "toy-002",
                                   "--ledger", ledger.path),
        "show --failed": cli("show", result.run_id, "--failed", "--ledger", ledger.path),
        "show json": cli("show", result.run_id, "--task", "toy-001", "--format", "json",
                         "--ledger", ledger.path),
        "trial": cli("run", proto, "--solver", command, "--task", "toy-001", "--task",
                     "toy-002", "--ledger", ledger.path),
    }
    for name, done in outputs.items():
        assert done.exit_code == 0, (name, done.output)
        for bad in ("\x1b", "\x07", "\x9b", "\r"):
            assert bad not in done.output, (name, bad)
    for name in ("show", "show --task", "trial"):
        assert "\\x1b[2J" in outputs[name].output, name  # shown, visibly escaped
    for path in (result.report_path.with_suffix(".md"), result.report_path.with_suffix(".html")):
        assert "\x1b" not in path.read_text()


FILL_WITHIN_BUDGET = r'''
if TASK == "toy-001":  # a real edit, then the rest of a small scratch disk filled from .git
    open("data.bin", "wb").write(os.urandom(3 << 20))
    try:
        with open(".git/filler", "wb") as handle:
            while True:
                handle.write(b"\0" * (1 << 16))
                handle.flush()
    except OSError as exc:
        report(error=exc.errno)
'''


@pytest.fixture
def small_scratch(base: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SEALBENCH_SCRATCH on a 12 MiB tmpfs of its own, unmounted afterwards."""
    import subprocess

    scratch = base / "scratch"
    scratch.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(scratch)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    monkeypatch.setenv("SEALBENCH_SCRATCH", str(scratch))
    try:
        yield scratch
    finally:
        subprocess.run(["umount", "-l", str(scratch)], check=False)


@pytest.mark.parametrize(("budget", "outcome"), [(4 << 20, "violation"),
                                             (256 << 20, "infrastructure_error")])
def test_a_full_disk_is_the_solvers_only_when_its_workspace_is_over_budget(
        base: Path, small_scratch: Path, budget: int, outcome: str) -> None:
    """ENOSPC while the workspace is over its own budget is the solver's; within its budget
    the scratch is too small for the protocol, and that is the harness's (retried, reported
    apart, with a hint)."""
    proto, ledger = sealed_variant(base, n=3, budget=f"  max_workspace_bytes: {budget}\n")
    command = hostile_solver(base / "agent", after=FILL_WITHIN_BUDGET)
    try:
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=1))
        run_id = result.run_id
    except Refused:  # where infrastructure errors block publication
        run_id = ledger.runs()[0].run_id
    row = records(ledger, run_id)["toy-001"]
    print(f"\n[full disk, budget {budget}] {row['outcome']}: {row['detail']}")
    assert row["outcome"] == outcome
    if outcome == "violation":
        assert ".git included" in row["detail"]
        assert hostile_report(ledger, row)["error"] == 28
    else:
        assert "No space left" in row["detail"] and "within its budget" in row["detail"]
    assert list(small_scratch.iterdir()) == []


FILL_SIDE = FILL_WITHIN_BUDGET.replace(
    '".git/filler"', 'os.path.join(os.path.dirname(os.environ["SEALBENCH_REFUSE_FILE"]), "junk")')


def test_a_disk_filled_from_the_refuse_files_directory_is_the_solvers(
        base: Path, small_scratch: Path) -> None:
    """The refuse file's directory is the solver's to write in: filling the disk from there
    (found by an attack: the workspace alone looked within budget) is its `violation`, never
    an infrastructure error that would take the task out of n."""
    proto, ledger = sealed_variant(base, n=3, budget=f"  max_workspace_bytes: {4 << 20}\n")
    command = hostile_solver(base / "agent", after=FILL_SIDE)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=1))
    row = records(ledger, result.run_id)["toy-001"]
    assert row["outcome"] == "violation", row["detail"]
    assert hostile_report(ledger, row)["error"] == 28
    assert result.report["n"] == 3 and result.report["infrastructure_errors"] == 0
    assert list(small_scratch.iterdir()) == []


# --------------------------------------------------------------------------- least privilege

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
LEASE_BREAK = Path("/proc/sys/fs/lease-break-time")

KERNEL_WRITES = r"""
if TASK == "toy-001":
    results = {}
    for path, value in CFG["writes"]:
        try:
            with open(path, "w") as handle:
                handle.write(value)
            results[path] = "written"
        except OSError as exc:
            results[path] = f"{type(exc).__name__}: {exc}"
    status = {line.split(":")[0]: line.split(":")[1].strip()
              for line in open("/proc/self/status") if line.startswith(("Cap", "Uid", "Gid"))}
    report(results=results, uid=os.getuid(), gid=os.getgid(), status=status)
"""


def test_solver_cannot_change_host_kernel_settings(base: Path) -> None:
    """Issue 9, acceptance 1: root's bwrap left /proc/sys writable, and a solver set
    kernel.core_pattern (a pipe there runs code as host root on the next crash) and
    fs.lease-break-time. Both writes fail now; the host values, read on the host, are unchanged;
    the solver is not uid 0 and holds no capability."""
    before = {path: path.read_text() for path in (CORE_PATTERN, LEASE_BREAK)}
    proto, ledger = sealed_toy(base)
    new_lease = str(int(before[LEASE_BREAK]) + 7)
    command = hostile_solver(base / "agent", before=KERNEL_WRITES,
                             writes=[[str(CORE_PATTERN), "|/bin/false %p"],
                                     [str(LEASE_BREAK), new_lease]])
    try:
        result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
        after = {path: path.read_text() for path in (CORE_PATTERN, LEASE_BREAK)}
    finally:  # never leave the host changed, even when the sandbox failed
        for path, value in before.items():
            if path.read_text() != value:
                path.write_text(value)
    seen = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])
    assert after == before
    assert set(seen["results"]) == {str(CORE_PATTERN), str(LEASE_BREAK)}
    for path, outcome in seen["results"].items():
        assert outcome.startswith("OSError: [Errno 30] Read-only file system"), (path, outcome)
    assert seen["uid"] != 0 and seen["gid"] != 0
    assert seen["status"]["CapEff"] == seen["status"]["CapPrm"] == "0" * 16
    assert result.report["n"] == 3


STEAL_ELSEWHERE = r"""
if TASK == "toy-001":
    import glob, subprocess
    found, errors = {}, {}
    for root in CFG["roots"]:
        try:
            os.listdir(root)
        except OSError as exc:
            errors[root] = type(exc).__name__
            continue
        for path in glob.glob(root + "/**", recursive=True):
            if os.path.isfile(path):
                try:
                    found[path] = open(path, "rb").read(4000).decode(errors="replace")
                except OSError as exc:
                    errors[path] = type(exc).__name__
    for path in CFG["files"]:
        try:
            found[path] = open(path, "rb").read(4000).decode(errors="replace")
        except OSError as exc:
            errors[path] = type(exc).__name__
    loot = [text for text in found.values() if "diff --git" in text]
    for text in loot:  # the attack that worked: replay a passing diff
        subprocess.run(["git", "apply", "-"], input=text, text=True, capture_output=True)
    report(found=sorted(found), errors=errors, replayed=len(loot))
    sys.exit(0)  # no honest work: it passes only if the replay did
"""


def test_other_copies_of_the_oracles_and_other_ledgers_are_absent(
        base: Path, outside: Path) -> None:
    """Issue 9, acceptance 2: with `--ro-bind / /` plus a deny-list, a solver read the
    example's oracles from another checkout and replayed passing diffs from a second ledger.
    Now a copy of the protocol (oracles included) in a fresh directory under /srv, named by no
    option, and a second ledger there with the passing diffs of an earlier run, are simply not
    in the sandbox."""
    proto, ledger = sealed_toy(base)
    copy = outside / "checkout"
    shutil.copytree(proto, copy)
    second = Ledger(outside / "ledger2" / "ledger.sqlite")
    seal(proto, ledger=second)
    honest = run(proto, write_solver(base / "honest"), ledger=second, options=RunOptions(jobs=2))
    assert honest.report["outcomes"]["pass"] == 3  # the second ledger holds passing diffs
    artifacts = second.artifacts.resolve()
    assert any(SOLVED.format(1) in p.read_bytes().decode(errors="replace")
               for p in artifacts.rglob("*") if p.is_file())
    command = hostile_solver(base / "agent", before=STEAL_ELSEWHERE,
                             roots=[str(outside), str(copy / "oracles"), str(artifacts)],
                             files=[str(copy / "oracles" / "toy-001.patch"),
                                    str(second.path.resolve())])
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    seen = hostile_report(ledger, rows["toy-001"])
    assert seen["found"] == [] and seen["replayed"] == 0
    assert set(seen["errors"].values()) == {"FileNotFoundError"}, seen["errors"]
    assert rows["toy-001"]["outcome"] == "fail"


def _memory_protocol(base: Path, max_memory_mb: int) -> tuple[Path, Ledger]:
    proto = make_protocol(base / "proto", n=3, min_n=3)
    shutil.rmtree(base / ".scratch-proto")
    spec = proto / "protocol.yaml"
    spec.write_text(spec.read_text().replace("budget:\n",
                                             f"budget:\n  max_memory_mb: {max_memory_mb}\n"))
    ledger = Ledger(base / "ledger" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    return proto, ledger


ALLOCATE = r"""
if TASK == "toy-001":
    report(allocating=CFG["bytes"])
    data = b"x" * CFG["bytes"]  # filled: every page really used
    report(allocated=len(data))
"""


def test_a_3_gib_allocation_is_a_violation(base: Path) -> None:
    """Issue 9, acceptance 5 (memory): budget.max_memory_mb is enforced per attempt (here by
    the attempt's memory cgroup); the solver that takes 3 GiB under a 1024 MiB limit is
    killed and scored `violation`; the run goes on and publishes."""
    proto, ledger = _memory_protocol(base, 1024)
    command = hostile_solver(base / "agent", before=ALLOCATE, bytes=3 << 30)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    seen = hostile_report(ledger, rows["toy-001"])
    assert seen == {"allocating": 3 << 30}  # it never got there
    assert rows["toy-001"]["outcome"] == "violation"
    assert rows["toy-001"]["detail"] == ("memory limit exceeded: budget.max_memory_mb is "
                                         "1024")
    assert rows["toy-000"]["outcome"] == rows["toy-002"]["outcome"] == "pass"
    assert result.report["n"] == 3 and result.report["infrastructure_errors"] == 0


def test_the_default_memory_limit_leaves_honest_work_alone(base: Path) -> None:
    """The default (4096 MiB) does not get in the way of a solver that needs 300 MiB."""
    proto, ledger = sealed_toy(base)
    command = hostile_solver(base / "agent", before=ALLOCATE, bytes=300 << 20)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = records(ledger, result.run_id)
    assert hostile_report(ledger, rows["toy-001"])["allocated"] == 300 << 20
    assert rows["toy-001"]["outcome"] == "pass"


READ_EXPOSED = r"""
if TASK == "toy-001":
    facts = {}
    try:
        facts["read"] = open(CFG["file"]).read()
    except OSError as exc:
        facts["read"] = type(exc).__name__
    try:
        open(CFG["file"], "a").write("hostile")
        facts["write"] = "written"
    except OSError as exc:
        facts["write"] = f"{type(exc).__name__}: {exc}"
    try:
        facts["beside"] = sorted(os.listdir(CFG["beside"]))
    except OSError as exc:
        facts["beside"] = type(exc).__name__
    report(**facts)
"""


def test_an_exposed_path_is_readable_read_only_and_recorded(base: Path, outside: Path,
                                                           cli: Any) -> None:
    """`run --expose PATH` opens one host path to the solver, read-only; the run header and
    report.json name it; anything beside it stays absent. What the run keeps from the solver
    cannot be exposed: one line, exit 2."""
    proto, ledger = sealed_toy(base)
    tool = outside / "toolchain"
    tool.mkdir()
    (tool / "data.txt").write_text("exposed data\n")
    (outside / "secret.txt").write_text("not exposed\n")
    command = hostile_solver(base / "agent", before=READ_EXPOSED, file=str(tool / "data.txt"),
                             beside=str(outside))
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2, expose=(tool,)))
    seen = hostile_report(ledger, records(ledger, result.run_id)["toy-001"])
    assert seen["read"] == "exposed data\n"
    assert seen["write"].startswith("OSError: [Errno 30] Read-only file system"), seen["write"]
    assert seen["beside"] == ["toolchain"]  # only the way to the exposed path
    assert (tool / "data.txt").read_text() == "exposed data\n"
    assert result.report["exposed"] == [str(tool)]
    assert json.loads(result.report_path.read_text())["exposed"] == [str(tool)]
    assert ledger.run(result.run_id).options["expose"] == [str(tool)]
    for inside in (proto / "oracles", ledger.artifacts, ledger.path):
        out = cli("run", proto, "--solver", command, "--expose", inside,
                  "--ledger", ledger.path)
        assert out.exit_code == 2, out.output + out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "--expose" in out.stderr and "must never read" in out.stderr


def test_a_sigint_aimed_at_the_sandbox_probe_never_downgrades_the_run(
        base: Path, tmp_path: Path) -> None:
    """Issue 9, acceptance 8 (first half): a Ctrl-C during the start-up bubblewrap probe used
    to record the run as `sandbox: none`. The probe runs in its own session (a terminal's
    Ctrl-C does not reach it), and when a signal does kill it, `run` stops with one line
    (exit 3) instead of falling back: no run is recorded. The probe is a stand-in `bwrap`
    first on PATH that waits, so the signal can be aimed at it."""
    import os
    import signal
    import subprocess
    import sys

    proto, ledger = sealed_toy(base)
    marker = f"61.{uuid.uuid4().int % 10**6:06d}"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(f"#!/bin/sh\nexec sleep {marker}\n")
    (fake / "bwrap").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    proc = subprocess.Popen([sys.executable, "-m", "sealbench.cli", "run", str(proto),
                             "--solver", write_solver(base / "agent"), "--ledger",
                             str(ledger.path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert _wait_for(lambda: processes_matching(marker), within=30)
        ((probe, _),) = processes_matching(marker)
        assert os.getsid(probe) == probe  # its own session, so its own process group
        assert os.getpgid(probe) != os.getpgid(proc.pid)
        os.kill(probe, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        kill_matching(marker)
    assert proc.returncode == 3, (out, err)
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "killed by signal SIGINT" in lines[0], lines
    assert "not falling back" in lines[0]
    assert Ledger(ledger.path).runs() == []
    assert b"sandbox: none" not in out + err


def test_only_bubblewraps_own_refusal_means_no_sandbox(tmp_path: Path) -> None:
    """The other side of the rule: a bwrap that says it cannot work here (its own `bwrap:`
    error, as on a kernel without user namespaces) still leads to `sandbox: none` with that
    reason; one that fails without saying why is an error."""
    from sealbench.sandbox import ProbeFailed, probe_bwrap

    refuses = tmp_path / "refuses"
    refuses.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                       "exit 1\n")
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 5\n")
    for script in (refuses, silent):
        script.chmod(0o755)
    assert "No permissions to create new namespace" in (probe_bwrap(str(refuses)) or "")
    with pytest.raises(ProbeFailed, match="status 5"):
        probe_bwrap(str(silent))
