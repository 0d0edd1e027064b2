"""Ports: a free loopback port for a server we start, and whether the server answering on it is ours.

`free_port` binds port 0 and lets the port go, so two processes that ask at once (two test workers, two
benches) can be handed the same one: the second server then fails to bind while the first answers its
health checks. `listener_is_ours` settles it on Linux: the socket listening on the port (/proc/net/tcp,
tcp6) must be held open by a process of the tree we started (/proc/<pid>/fd). True, False (another
process listens there), or None where it cannot tell (no /proc, no listener visible yet).

`start_ours` is the loop every launcher of ours runs around them (EngineProcess, the synthetic server's
`spawn`, the fault proxy's engine): launch on a port, wait until the server answers from our tree, and on a
port another process holds (`Taken`) stop it and launch again on a new one. The caller says how to launch,
probe and stop, and turns `Taken`, `Exited` and `TimedOut` into its own errors.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Callable

from .memory import PROC, tree_pids

HOST = "127.0.0.1"
LISTEN = "0A"  # the TCP state column of /proc/net/tcp for a listening socket
TRIES = 3  # ports tried when another process takes the one we chose before our server binds it


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listening_inodes(port: int) -> set[str]:
    """Inodes of the sockets listening on `port` (IPv4 and IPv6), from /proc/net; empty where unreadable."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets a process holds open; empty when it is gone or not ours to read."""
    found = set()
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def listener_is_ours(port: int, root_pid: int) -> bool | None:
    """Is the socket listening on `port` held by `root_pid` or a process of its tree (memory.tree_pids)?
    None when no listener shows (no /proc, or the kernel lists none yet)."""
    listening = listening_inodes(port)
    if not listening:
        return None
    return any(listening & socket_inodes(pid) for pid in tree_pids(root_pid))


class NotReady(Exception):
    """The server we launched did not come up as ours; the subclass says how, the message in a phrase."""


class Taken(NotReady):
    """Another process holds the port: ours exited unable to bind it (`code`), or another answers (`code` None)."""

    def __init__(self, port: int, code: int | None):
        if code is None:
            super().__init__(f"another process answers on port {port}")
        else:
            super().__init__(f"exited with status {code}: another process holds port {port}")
        self.port, self.code = port, code


class Exited(NotReady):
    """Ours exited before it answered, and no other process holds the port."""

    def __init__(self, code: int):
        super().__init__(f"exited with status {code} before it was ready")
        self.code = code


class TimedOut(NotReady):
    """Ours is still running but did not answer within `timeout_s`."""

    def __init__(self, timeout_s: float):
        super().__init__(f"not ready after {timeout_s:g} s")
        self.timeout_s = timeout_s


def wait_ours(
    proc: subprocess.Popen, port: int, answers: Callable[[], bool], timeout_s: float, poll_s: float = 0.1
) -> float:
    """Seconds until `answers()` (one probe) holds and the listener on `port` is not another process's
    (listener_is_ours; None, cannot tell, counts as ours). Taken, Exited or TimedOut otherwise."""
    start = time.monotonic()
    while True:
        code = proc.poll()
        if code is not None:
            if listener_is_ours(port, proc.pid) is False:
                raise Taken(port, code)
            raise Exited(code)
        if answers():
            if listener_is_ours(port, proc.pid) is False:
                raise Taken(port, None)
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimedOut(timeout_s)
        time.sleep(poll_s)


def start_ours(
    launch: Callable[[int], subprocess.Popen],
    answers: Callable[[int], bool],
    stop: Callable[[subprocess.Popen], None],
    *,
    timeout_s: float,
    port: int | None = None,
    choose: Callable[[], int] = free_port,
    tries: int = TRIES,
    poll_s: float = 0.1,
    retrying: Callable[[int], None] | None = None,
) -> tuple[subprocess.Popen, int, float]:
    """`launch(port)` starts the server on a port (`port` first if given, then `choose()`); wait_ours with
    the probe `answers(port)`. Where another process holds the port, `stop(proc)`, `retrying(port)` and
    launch again on a new one, `tries` ports in all. (process, port, seconds to ready); on any failure the
    process is stopped and the error raised: Taken (the last port), Exited, TimedOut or what launch raised."""
    for attempt in range(tries):
        port = port if attempt == 0 and port is not None else choose()
        proc = launch(port)
        try:
            return proc, port, wait_ours(proc, port, lambda: answers(port), timeout_s, poll_s)
        except Taken:
            stop(proc)
            if attempt == tries - 1:
                raise
            if retrying is not None:
                retrying(port)
        except BaseException:
            stop(proc)
            raise
    raise ValueError(f"tries must be >= 1, got {tries}")
