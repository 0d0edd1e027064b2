"""Ports: a free loopback port for a server we start, and whether the server answering on it is ours.

`free_port` binds port 0 and lets the port go, so two processes that ask at once (two test workers, two
benches) can be handed the same one: the second server then fails to bind while the first answers its
health checks. `listener_is_ours` settles it on Linux: the socket listening on the port (/proc/net/tcp,
tcp6) must be held open by a process of the tree we started (/proc/<pid>/fd). True, False (another
process listens there), or None where it cannot tell (no /proc, no listener visible yet).
"""

from __future__ import annotations

import os
import socket

from .memory import PROC, tree_pids

HOST = "127.0.0.1"
LISTEN = "0A"  # the TCP state column of /proc/net/tcp for a listening socket


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
