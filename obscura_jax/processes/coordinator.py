"""Reaching the coordinator before jax.distributed.initialize, and bounding it.

jax.distributed.initialize gives no Python error for a coordinator it cannot use:
process 0 dies of SIGSEGV when its port is taken, and every other process waits out
`initialization_timeout` and then aborts with a C++ stack (XLA's coordination agent
terminates the process; jax passes no callback that could raise instead). So the
checks come first, in Python, each a one-line error:

- process 0 binds the coordinator's port for a moment (`check_port_free`): taken,
  and the run stops before JAX starts its service;
- the others' join is watched by `JoinDeadline`: after `reach` seconds without having
  joined, the coordinator is probed (`probe`: a TCP connection and the HTTP/2
  preface, which a gRPC server such as JAX's coordination service answers with a
  SETTINGS frame); a coordinator that refuses, does not answer or is not a gRPC
  server (another program holds the port) ends the process with one line. One that
  is a gRPC server is JAX's, waiting for the other processes to join: the wait goes
  on up to `join` seconds, still ending in one line of ours before JAX's own abort
  (initialization_timeout is set longer than `join`).
"""
from __future__ import annotations

import errno
import os
import socket
import sys
import threading

from obscura_jax.errors import UsageError

EXIT_NO_COORDINATOR = 2    # a coordinator address that does not work is bad input
EXIT_NOT_JOINED = 17       # as the watchdog's lost process: a process never came
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])   # + an empty SETTINGS


def split_address(coordinator: str) -> tuple[str, int]:
    host, port = coordinator.rsplit(":", 1)
    return host.strip("[]"), int(port)


def check_port_free(coordinator: str) -> None:
    """Process 0: a UsageError if another program holds the coordinator's port on
    this host (JAX's service binds every interface, `[::]:PORT`)."""
    _, port = split_address(coordinator)
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((address, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise UsageError(f"coordinator port {port} is taken on this host: another program or run "
                                 "listens there; choose another port in --coordinator HOST:PORT") from None
            # no IPv6 (or IPv4) on this host: the other family decides


def probe(coordinator: str, timeout: float = 3.0) -> str | None:
    """None if a gRPC server answers at `coordinator`, else why not, in words."""
    host, port = split_address(coordinator)
    other = "something listens there that is not JAX's coordination service (another program holds the port)"
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        return "connection refused: nothing listens there (is process 0 running, with this --coordinator?)"
    except socket.timeout:
        return f"no connection within {timeout:.0f} s (is the host reachable, and the port open?)"
    except OSError as e:
        return f"{e.strerror or type(e).__name__} (is the address right?)"
    with s:
        try:
            s.sendall(H2_PREFACE)
            head = s.recv(9)
        except OSError:          # no answer in time, or the connection dropped
            return other
    if len(head) < 4 or head[3] != 4:      # the first frame a gRPC server sends is SETTINGS (type 4)
        return other
    return None


class JoinDeadline:
    """A daemon thread that ends this process with one line when `__exit__` has not
    come `reach` s (reaching the coordinator) or `join` s (everyone joining) after
    `__enter__`. Process 0 hosts the service: only the `join` bound applies to it."""

    def __init__(self, coordinator: str, rank: int, size: int, *, reach: float, join: float):
        self.coordinator, self.rank, self.size = coordinator, rank, size
        self.reach, self.join = min(reach, join), join
        self._joined = threading.Event()

    def __enter__(self) -> "JoinDeadline":
        threading.Thread(target=self._watch, daemon=True, name="obscura-join-deadline").start()
        return self

    def __exit__(self, *exc) -> None:
        self._joined.set()

    def _watch(self) -> None:
        if self.rank != 0 and not self._joined.wait(self.reach):
            why = probe(self.coordinator)
            if why is not None and not self._joined.is_set():
                self._end(f"process {self.rank} of {self.size} cannot reach the coordinator {self.coordinator} "
                          f"after {self.reach:.0f} s: {why}", EXIT_NO_COORDINATOR)
        if not self._joined.wait(self.join - (0 if self.rank == 0 else self.reach)):
            self._end(f"process {self.rank} of {self.size}: not every process joined the run within "
                      f"{self.join:.0f} s (coordinator {self.coordinator}; is every process started, with the "
                      "same --coordinator and --num-processes?)", EXIT_NOT_JOINED)

    @staticmethod
    def _end(line: str, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"obscura: error: {line}\n")
        sys.stderr.flush()
        os._exit(code)
