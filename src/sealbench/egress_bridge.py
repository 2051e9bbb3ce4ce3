"""The bridge inside the sandbox under `budget.network: model-api` (docs/isolation.md).

    python -I -S egress_bridge.py SOCKET PORT -- SOLVER ARGV...

Listens on 127.0.0.1:PORT in the sandbox's own network namespace (loopback only), starts the
solver as its child, and forwards every TCP connection accepted there to the UNIX socket
SOCKET, behind which the harness's egress proxy decides what may pass. It exits with the
solver's status (a signal death is passed on as the same signal), and prints nothing but one
line when the solver cannot be started at all.

The bridge is no security boundary: the solver may kill it or talk to SOCKET itself, and
reaches nothing more either way. It runs in isolated mode without `site`, so it imports only
the standard library: it must not depend on anything the solver could have placed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2)
EXIT_CANNOT_START = 127
EXIT_USAGE = 125


def parse_args(args: list[str]) -> tuple[str, int, list[str]]:
    """SOCKET PORT -- ARGV...; ValueError when the command line is not that."""
    if len(args) < 4 or args[2] != "--":
        raise ValueError("usage: egress_bridge.py SOCKET PORT -- COMMAND...")
    port = int(args[1])
    if not 0 < port < 65536:
        raise ValueError(f"bad port {port}")
    return args[0], port, args[3:]


def exit_status(returncode: int) -> int:
    """The status a shell would report for a child that ended with returncode (Popen's:
    negative for a signal)."""
    return 128 - returncode if returncode < 0 else returncode


def _copy(source: socket.socket, target: socket.socket, done: threading.Semaphore) -> None:
    """One direction of a connection; end of input is passed on as a half-close."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
        done.release()


def _forward(conn: socket.socket, path: str) -> None:
    with conn:
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(path)
        except OSError:
            return  # the proxy is gone (the attempt is ending): the client sees a reset
        with upstream:
            done = threading.Semaphore(0)
            for source, target in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_copy, args=(source, target, done), daemon=True).start()
            done.acquire()
            done.acquire()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        threading.Thread(target=_forward, args=(conn, path), daemon=True).start()


def _die_like(returncode: int) -> None:
    """End this process the way the child ended: by the same signal, or with its status."""
    if returncode < 0:
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    os._exit(exit_status(returncode))


def main(args: list[str]) -> None:
    try:
        path, port, argv = parse_args(args)
    except ValueError as exc:
        sys.stderr.write(f"sealbench egress bridge: {exc}\n")
        os._exit(EXIT_USAGE)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError as exc:
        sys.stderr.write(f"sealbench egress bridge: cannot listen on 127.0.0.1:{port}: "
                         f"{exc.strerror or exc}\n")
        os._exit(EXIT_USAGE)
    try:
        child = subprocess.Popen(argv)  # stdin, stdout, stderr: the sandbox's own
    except OSError as exc:
        sys.stderr.write(f"sealbench egress bridge: cannot start {argv[0]}: "
                         f"{exc.strerror or exc}\n")
        os._exit(EXIT_CANNOT_START)
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda signum, _frame: child.send_signal(signum))
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    while True:
        try:
            returncode = child.wait()
            break
        except InterruptedError:
            continue
    _die_like(returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
