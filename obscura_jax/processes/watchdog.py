"""A heartbeat watchdog over the coordination service's key-value store, so that a
process that dies or hangs stops every other process within seconds, each with
one line naming it.

Why not jax.distributed's own heartbeat: on a lost peer XLA aborts every process
(SIGABRT, a long log, no name of the lost process on most of them) only after
`heartbeat_timeout_seconds`; a peer that is alive but stuck is never noticed; and
the lost-heartbeat callback cannot be reached from Python (jax.distributed does not expose it).
The jax heartbeat stays as a backstop, set longer than this one's limit.

One daemon thread per process; every `period` seconds it writes its own beat
(obscura/hb/<rank>) and reads everyone's beats, aborts and clean ends. It ends the
process, printing one line `obscura: error: ...` and calling os._exit, when

    a peer's beat has not changed for `limit` s     lost process P (no heartbeat for N s)
    a peer published an abort line                   that same line
    this process made no progress for the time    process R made no progress for N s after ...
      its last `progress` mark allowed (+ 2 `limit` while it waits for another process, so
      the stuck one speaks first)
    the store does not answer for `limit` s       lost process 0 (its coordination service
                                                  did not answer for N s: stopped or hung)

The last rule is why every call to the store is bounded (`bounded_call`): the store
lives in process 0, and a process 0 that is stopped (SIGSTOP, a debugger, a host
that freezes) keeps its sockets open, so a call to it neither fails nor returns,
and a watchdog that waited on it would never judge anything. A call that does not
come back within `limit` s is itself the verdict on process 0: no second channel is
needed, and it works the same on one host or several (docs/multiprocess.md,
"Faults").

Beats are judged on the local monotonic clock, so host clocks never matter.
`abort(line, code)` is how the run's own errors stop every process the same way (the one
path that ends every process of a run with one line: DistributedGroup.fail uses it).
Process 0 hosts the coordination service: when it exits, XLA aborts the others
within ~0.2 s, so it lingers `linger` s after publishing, letting them print their
own line first. os._exit, not a normal exit: worker threads may be blocked in XLA
calls nothing can interrupt, and a normal exit runs jax.distributed.shutdown(),
which waits for the lost process.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

EXIT_LOST, EXIT_PEER, EXIT_STALL = 17, 18, 19
PREFIX = "obscura"
PUBLISH_TIMEOUT_S = 2.0     # telling the others is worth this much of a dying process's time


def bounded_call(fn, timeout: float):
    """fn() in a daemon thread: its result (or its exception), or TimeoutError after
    `timeout` s. A call that never returns stays blocked in its thread; the caller
    is about to end the process then."""
    box: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  handed to the caller
            box["error"] = e
        finally:
            done.set()
    threading.Thread(target=run, daemon=True, name="obscura-watchdog-call").start()
    if not done.wait(timeout):
        raise TimeoutError(f"no answer within {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class Watchdog:
    def __init__(self, client, rank: int, size: int, *, period: float = 1.0, limit: float = 15.0,
                 allow: float = 600.0, linger: float = 2.5, waiting_on=lambda: ""):
        self.client, self.rank, self.size = client, rank, size
        self.period, self.limit, self.linger = period, limit, linger
        self.allow = allow                  # seconds the current phase may take (until the next mark)
        self.waiting_on = waiting_on        # () -> '' or what this process waits for from another
        self._progress_at = time.monotonic()
        self._progress = "start-up"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[str | None, float]] = {}
        self._thread = threading.Thread(target=self._run, name="obscura-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        now = time.monotonic()
        self._seen = {p: (None, now) for p in range(self.size) if p != self.rank}
        self._beat()
        self._thread.start()
        return self

    def progress(self, what: str, allow: float) -> None:
        """This process finished `what`; the next mark is due within `allow` seconds."""
        self._progress_at, self._progress, self.allow = time.monotonic(), what, allow

    def finish(self) -> None:
        """A clean end: the others stop watching this process."""
        self._stop.set()
        try:
            bounded_call(lambda: self.client.key_value_set(f"{PREFIX}/done/{self.rank}", "1",
                                                           allow_overwrite=True), PUBLISH_TIMEOUT_S)
        except Exception:  # the service may already be going down at the very end
            pass

    def lost_peer(self) -> str | None:
        """A verdict on the peers now (None if all beat): used before blaming a
        failed transfer on this process."""
        now = time.monotonic()
        for p, (_, since) in self._seen.items():
            if now - since > self.limit:
                return f"lost process {p} (no heartbeat for {now - since:.0f} s)"
        return None

    def abort(self, line: str, code: int, publish: bool = True, heading: str = "error") -> None:
        """Print `obscura: <heading>: <line>` once, tell the others (they print it too),
        and end the process with `code`."""
        with self._lock:
            sys.stdout.flush()
            sys.stderr.write(f"{PREFIX}: {heading}: {line}\n")
            sys.stderr.flush()
            if publish:
                told = json.dumps({"line": line, "code": code, "heading": heading})
                try:
                    bounded_call(lambda: self.client.key_value_set(f"{PREFIX}/abort/{self.rank}", told,
                                                                   allow_overwrite=True), PUBLISH_TIMEOUT_S)
                except Exception:  # the service is gone or stopped: nobody is left to tell
                    pass
            if self.rank == 0:   # its exit takes the service down: let the others read first
                time.sleep(self.linger)
            os._exit(code)

    # ---- the thread ------------------------------------------------------------------
    def _beat(self) -> None:
        self.client.key_value_set(f"{PREFIX}/hb/{self.rank}", str(time.monotonic_ns()), allow_overwrite=True)

    def _read(self, name: str) -> dict[str, str]:
        return {k.rsplit("/", 1)[-1]: v for k, v in self.client.key_value_dir_get(f"{PREFIX}/{name}/")}

    def _round(self) -> tuple[dict, dict, dict]:
        self._beat()
        return self._read("hb"), self._read("abort"), self._read("done")

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            now = time.monotonic()
            try:
                beats, aborts, done = bounded_call(self._round, self.limit)
            except TimeoutError:
                if not self._stop.is_set():
                    self.abort(f"lost process 0 (its coordination service did not answer for {self.limit:.0f} s: "
                               "stopped or hung)", EXIT_LOST, publish=False)
                return
            except Exception as e:  # noqa: BLE001  the service (process 0) is gone
                if not self._stop.is_set():
                    reason = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
                    self.abort(f"lost process 0 (coordination service unreachable: {reason})", EXIT_LOST,
                               publish=False)
                return
            if self._stop.is_set():
                return
            for p in sorted(aborts, key=int):
                if int(p) != self.rank:
                    told = json.loads(aborts[p])
                    self.abort(told["line"], told.get("code", EXIT_PEER), publish=False,
                               heading=told.get("heading", "error"))
            for p, (old, since) in self._seen.items():
                if str(p) in done:
                    continue
                beat = beats.get(str(p))
                if beat != old:
                    self._seen[p] = (beat, now)
                elif now - since > self.limit:
                    self.abort(f"lost process {p} (no heartbeat for {now - since:.0f} s)", EXIT_LOST)
            waiting = self.waiting_on()
            idle = now - self._progress_at
            if idle > self.allow + (2 * self.limit if waiting else 0):
                self.abort(f"process {self.rank} made no progress for {idle:.0f} s after {self._progress}"
                           + (f" ({waiting})" if waiting else ""), EXIT_STALL)
