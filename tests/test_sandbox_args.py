"""Table tests for the pure bubblewrap argument builder (sandbox.bwrap_args): what each kind of
path becomes, and in which order (docs/isolation.md). The host layout is passed in, so merged
and split /usr layouts are both checked whatever this machine has."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from sealbench.sandbox import SANDBOX_UID, HostLayout, Mounts, bwrap_args, etc_restricted

MERGED = HostLayout(system=((Path("/usr"), None), (Path("/bin"), "usr/bin"),
                            (Path("/lib64"), "usr/lib64")),
                    etc_restricted=(Path("/etc/shadow"),))
SPLIT = HostLayout(system=((Path("/usr"), None), (Path("/bin"), None), (Path("/lib"), None)))


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    """Every (source, destination) given to a two-argument flag, in order."""
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def _index(args: list[str], *triple: str) -> int:
    for i in range(len(args) - len(triple) + 1):
        if tuple(args[i:i + len(triple)]) == triple:
            return i
    raise AssertionError(f"{triple} not in {args}")


@pytest.mark.parametrize(("host", "binds", "links"), [
    (MERGED, [("/usr", "/usr")], [("usr/bin", "/bin"), ("usr/lib64", "/lib64")]),
    (SPLIT, [("/usr", "/usr"), ("/bin", "/bin"), ("/lib", "/lib")], []),
])
def test_system_directories_are_bound_read_only_or_linked(
        host: HostLayout, binds: list[tuple[str, str]], links: list[tuple[str, str]],
        tmp_path: Path) -> None:
    args = bwrap_args(Mounts(workspace=tmp_path), network=False, host=host)
    assert _pairs(args, "--ro-bind")[:len(binds)] == binds
    assert ("/etc", "/etc") in _pairs(args, "--ro-bind")
    assert _pairs(args, "--symlink") == links
    assert "/" not in [src for src, _ in _pairs(args, "--ro-bind")]  # never the whole host


@pytest.mark.parametrize(("network", "unshared"), [(False, True), (True, False)])
def test_identity_capabilities_and_namespaces(network: bool, unshared: bool,
                                              tmp_path: Path) -> None:
    args = bwrap_args(Mounts(workspace=tmp_path), network=network, host=SPLIT)
    assert args[_index(args, "--uid") + 1] == args[_index(args, "--gid") + 1] == str(SANDBOX_UID)
    for flag in ("--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
                 "--die-with-parent", "--new-session"):
        assert flag in args
    assert args[_index(args, "--cap-drop") + 1] == "ALL"
    assert ("--unshare-net" in args) is unshared


def test_proc_is_read_only_right_after_it_is_mounted(tmp_path: Path) -> None:
    args = bwrap_args(Mounts(workspace=tmp_path), network=False, host=MERGED)
    assert _index(args, "--remount-ro", "/proc") == _index(args, "--proc", "/proc") + 2


@pytest.mark.parametrize(("where", "emitted"), [
    ("runtime", True),    # a hidden path inside the solver's own files: hidden again
    ("exposed", True),    # inside an exposed path: hidden again
    ("nowhere", False),   # outside everything bound: absent anyway, nothing to emit
])
def test_hidden_paths_only_inside_what_is_bound(where: str, emitted: bool,
                                                tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    secret_dir, secret_file = mine / "ledger.artifacts", mine / "ledger.sqlite"
    secret_dir.mkdir(parents=True)
    secret_file.write_text("x")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    bound = {"runtime": {"runtime": (mine,)}, "exposed": {"exposed": (mine,)},
             "nowhere": {}}[where]
    mounts = Mounts(workspace=workspace, hidden=(secret_dir, secret_file), **bound)
    args = bwrap_args(mounts, network=False, host=SPLIT)
    assert (("--tmpfs", str(secret_dir)) in itertools.pairwise(args)) is emitted
    assert ((str(secret_file)) in [d for s, d in _pairs(args, "--ro-bind")
                                   if s == "/dev/null"]) is emitted
    if emitted:  # bound first, then hidden, then the workspace
        mine_at = _index(args, "--ro-bind", str(mine), str(mine))
        assert mine_at < _index(args, "--tmpfs", str(secret_dir)) < _index(
            args, "--bind", str(workspace), str(workspace))


def test_restricted_etc_files_are_hidden(tmp_path: Path) -> None:
    """An /etc entry only its owner may read (shadow...) becomes /dev/null; /etc/passwd, which
    every Linux has, stands in for one here."""
    host = HostLayout(system=SPLIT.system, etc_restricted=(Path("/etc/passwd"),))
    args = bwrap_args(Mounts(workspace=tmp_path), network=False, host=host)
    assert _index(args, "--ro-bind", "/dev/null", "/etc/passwd") > _index(
        args, "--ro-bind", "/etc", "/etc")


def test_runtime_inside_a_system_directory_is_not_bound_twice(tmp_path: Path) -> None:
    mounts = Mounts(workspace=tmp_path, runtime=(Path("/usr/bin"), tmp_path / "venv"))
    args = bwrap_args(mounts, network=False, host=SPLIT)
    sources = [s for s, _ in _pairs(args, "--ro-bind")]
    assert "/usr/bin" not in sources and str(tmp_path / "venv") in sources


def test_attempt_paths_and_private_dirs(tmp_path: Path) -> None:
    prompt, out = tmp_path / "prompt.txt", tmp_path / "out"
    args = bwrap_args(Mounts(workspace=tmp_path / "ws", readable=(prompt,), writable=(out,)),
                      network=False, host=SPLIT)
    for private in ("/tmp", "/var/tmp", "/run", "/dev/shm"):
        assert _index(args, "--tmpfs", private) > 0
    assert (str(prompt), str(prompt)) in _pairs(args, "--ro-bind")
    assert (str(out), str(out)) in _pairs(args, "--bind")
    assert args[-5:] == ["--chdir", str(tmp_path / "ws"), "--setenv", "HOME", "/tmp"]


def test_a_private_home_is_bound_writable_and_named_home(tmp_path: Path) -> None:
    """The solver's HOME is its attempt's own directory, bound over the private /tmp it lies
    in (the scratch dir is under /tmp), not the shared /tmp itself."""
    home = tmp_path / "attempt" / "home"
    args = bwrap_args(Mounts(workspace=tmp_path / "attempt" / "ws", home=home),
                      network=False, host=SPLIT)
    assert (str(home), str(home)) in _pairs(args, "--bind")
    assert _index(args, "--bind", str(home)) > _index(args, "--tmpfs", "/tmp")
    assert args[-5:] == ["--chdir", str(tmp_path / "attempt" / "ws"), "--setenv", "HOME",
                         str(home)]


def test_etc_restricted_finds_what_others_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "open.conf").write_text("x")
    (tmp_path / "shadow").write_text("x")
    (tmp_path / "shadow").chmod(0o640)
    (tmp_path / "ssl" / "private").mkdir(parents=True)
    (tmp_path / "ssl" / "private").chmod(0o700)
    (tmp_path / "ssl" / "private" / "key.pem").write_text("x")
    (tmp_path / "ssl" / "certs").mkdir()
    (tmp_path / ".pwd.lock").write_text("")  # owner-only but empty: nothing to hide
    (tmp_path / ".pwd.lock").chmod(0o600)
    (tmp_path / "rules.d").mkdir(mode=0o700)
    assert etc_restricted(tmp_path) == (tmp_path / "shadow", tmp_path / "ssl" / "private")


def test_hidden_paths_are_covered_where_a_symlinked_bind_shows_them(tmp_path: Path) -> None:
    """Found by an attack: a solver reached through a symlinked directory (`lnk/sub/solve.sh`
    with `lnk -> real`) had `lnk/sub` bound, while the hidden protocol dir and ledger are named
    by their real paths (`real/sub/...`): nothing was covered and the solver read the oracles.
    The hidden paths are covered at the spelling the solver sees."""
    real = tmp_path / "real" / "sub"
    protocol, ledger = real / "proto", real / "ledger.sqlite"
    protocol.mkdir(parents=True)
    ledger.write_text("x")
    (tmp_path / "lnk").symlink_to(tmp_path / "real")
    alias = tmp_path / "lnk" / "sub"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    mounts = Mounts(workspace=workspace, runtime=(alias,), hidden=(protocol, ledger))
    args = bwrap_args(mounts, network=False, host=SPLIT)
    assert ("--tmpfs", str(alias / "proto")) in itertools.pairwise(args)
    assert str(alias / "ledger.sqlite") in [d for s, d in _pairs(args, "--ro-bind")
                                            if s == "/dev/null"]


def test_only_a_python_prefix_brings_its_whole_directory(tmp_path: Path) -> None:
    """Found by an attack: `~/bin/agent` bound all of `~` (other benchmarks, old ledgers).
    The directory above `bin/` comes along only for a virtual environment or a Python
    installation, whose interpreter needs the rest of it."""
    from sealbench.sandbox import command_files as solver_files

    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    agent = home / "bin" / "agent"
    agent.write_text("#!/bin/sh\n")
    assert home not in solver_files((str(agent),))
    assert home / "bin" in solver_files((str(agent),))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    python = venv / "bin" / "python"
    python.write_text("")
    assert venv in solver_files((str(python), "-m", "agent"))


@pytest.mark.parametrize(("first_line", "expected"), [
    (b"#!/opt/venv/bin/python\n", "/opt/venv/bin/python"),
    (b"#! /opt/venv/bin/python -u\n", "/opt/venv/bin/python"),
    (b"#!/usr/bin/env sh\n", shutil.which("sh")),
    (b"#!/usr/bin/env -S sh -e\n", shutil.which("sh")),
    (b"#!/usr/bin/env\n", None),
    (b"#!\n", None),
    (b"print('no shebang')\n", None),
    (b"\x7fELF\x02\x01", None),
])
def test_script_interpreter_reads_the_shebang(tmp_path: Path, first_line: bytes,
                                              expected: str | None) -> None:
    from sealbench.sandbox import script_interpreter

    script = tmp_path / "script"
    script.write_bytes(first_line + b"echo body\n")
    assert script_interpreter(script) == expected


def test_a_console_script_brings_the_python_its_venv_links_to(tmp_path: Path) -> None:
    """Found running mini-swe-agent: `venv/bin/mini` starts with `#!venv/bin/python`, a
    symlink to a Python installed outside the system directories (pyenv's, under ~). Naming
    the script alone bound the venv but not that installation, so the script died in the
    sandbox with "required file not found". Its interpreter is followed like a named one."""
    from sealbench.sandbox import command_files as solver_files

    base_python = tmp_path / "pyenv" / "versions" / "3.11.7"
    (base_python / "bin").mkdir(parents=True)
    (base_python / "lib" / "python3.11").mkdir(parents=True)
    (base_python / "bin" / "python3.11").write_text("")
    venv = tmp_path / "agent-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base_python / 'bin'}\n")
    (venv / "bin" / "python").symlink_to(base_python / "bin" / "python3.11")
    mini = venv / "bin" / "mini"
    mini.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n")
    visible = solver_files(("bash", "wrapper.sh", str(mini)))
    assert venv in visible and base_python in visible


def test_the_egress_socket_is_bound_last_at_its_place_inside(tmp_path: Path) -> None:
    """Under budget.network model-api the proxy's socket is the one way out: bound read-only
    (connect() needs no write access) after every hidden path, so no hiding can cover it,
    and the network namespace stays unshared."""
    sock = tmp_path / "side" / "egress.sock"
    inside = Path("/run/sealbench/egress.sock")
    mounts = Mounts(workspace=tmp_path / "ws", hidden=(tmp_path,), runtime=(tmp_path,),
                    sockets=((sock, inside),))
    args = bwrap_args(mounts, network=False, host=SPLIT)
    assert "--unshare-net" in args
    at = _index(args, "--ro-bind", str(sock), str(inside))
    assert at > _index(args, "--tmpfs", str(tmp_path))
    assert at > _index(args, "--tmpfs", "/run")
    assert at > _index(args, "--bind", str(tmp_path / "ws"), str(tmp_path / "ws"))
    assert "egress.sock" not in " ".join(bwrap_args(Mounts(workspace=tmp_path), network=False,
                                                    host=SPLIT))


def test_a_fifo_named_on_the_command_line_is_bound_without_being_read(tmp_path: Path) -> None:
    """Looking for a `#!` line must not open a FIFO for reading: that waits for a writer for
    ever, and `run` with it (a careless `--solver "bash /path/to/fifo"`)."""
    import os
    import threading

    from sealbench.sandbox import command_files, regular_file_head

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    found: list[tuple[Path, ...]] = []
    worker = threading.Thread(target=lambda: found.append(command_files(("bash", str(fifo)))),
                              daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "command_files blocked on a FIFO"
    assert fifo in found[0] and tmp_path in found[0]
    assert regular_file_head(fifo, 16) is None


def test_symlink_chain_lists_each_hop_unresolved(tmp_path: Path) -> None:
    import os

    from sealbench.sandbox import symlink_chain

    (tmp_path / "real").write_text("x")
    os.symlink("real", tmp_path / "one")
    os.symlink(tmp_path / "one", tmp_path / "two")
    os.symlink("loop", tmp_path / "loop")
    assert symlink_chain(tmp_path / "two") == [tmp_path / "two", tmp_path / "one",
                                               tmp_path / "real"]
    assert symlink_chain(tmp_path / "real") == [tmp_path / "real"]
    assert len(symlink_chain(tmp_path / "loop", max_hops=5)) == 6
