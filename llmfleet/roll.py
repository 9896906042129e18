"""A batched roll's promise, kept whether or not the hosts of a deploy run in step.

A roll (the reboots, the vLLM restarts) takes at most `*_max_unavailable` hosts out of service
at once, and the first host that fails stops it: the hosts after it are left as they are.

In one pyinfra run in step (`pyinfra INV deploy.py`, the default), pyinfra's `_parallel=N` makes
the batches: every host waits for the whole batch before the next one starts. That no longer
holds when hosts do not wait for each other: pyinfra's `--no-wait` runs each host's operations
on their own and ignores `_parallel` (pyinfra 3.10, pyinfra/api/operations.py: `_run_no_wait_ops`
spawns one greenlet per host for all its operations; only `_run_single_op` reads `_parallel`),
and `llmfleet deploy` runs the fleet in shards, one pyinfra process each. So a host holds a slot
for as long as it is out of service: one of N lock files (`flock`, released by the kernel when
the process ends, so a killed deploy holds nothing), in a folder every shard of one deploy
shares (``LLMFLEET_ROLL_DIR``, set by `llmfleet deploy`), else in a folder of the process's own.
A failure is written beside the slots, so a stop in one shard stops the others.

In step the slots are never contended (a batch is N hosts and there are N slots); without step
they are a sliding window of N: at most N hosts out at once, the next starting as soon as one is
back, rather than batch after batch.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ENV = "LLMFLEET_ROLL_DIR"
POLL_S = 0.5
REBOOT, VLLM = "reboot", "vllm"  # the rolls of deploy.py (operations/reboot.py, operations/vllm.py)


@dataclass
class Roll:
    """One named roll ("reboot", "vllm") of this process, against the slots of `folder`."""

    name: str
    folder: Path
    sleep: Callable[[float], Any] = time.sleep  # gevent.sleep under pyinfra: other hosts go on
    held: dict[str, tuple[int, Any]] = field(default_factory=dict)  # host -> (lock fd, its greenlet)

    def _stop_file(self) -> Path:
        return self.folder / f"{self.name}.stopped"

    def stopped(self) -> str | None:
        """Who stopped this roll and why ("host why"), in any process of the deploy, or None."""
        try:
            return self._stop_file().read_text().strip() or "a host (no reason recorded)"
        except FileNotFoundError:
            return None

    def stop(self, host: str, why: str = "") -> None:
        """Record the first failure, "host why" (the first writer wins across processes), and free
        the host's slot."""
        try:
            fd = os.open(self._stop_file(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(f"{host} {why}".strip() + "\n")
        self.leave(host)

    def enter(self, host: str, limit: int, greenlet: Any = None,
              is_dead: Callable[[Any], bool] = lambda g: bool(getattr(g, "dead", False))) -> str | None:
        """Wait for one of `limit` slots and hold it for `host`: None once held, or why the host must
        not go (the roll was stopped, before or while it waited). A holder whose greenlet died
        without leaving (its operation raised) failed in the middle of its roll: its slot is freed
        and the roll stopped."""
        if limit < 1:
            raise ValueError(f"a roll needs at least one slot, not {limit}")
        while True:
            self._reap(is_dead)
            why = self.stopped()
            if why:
                return why
            for i in range(limit):
                fd = os.open(self.folder / f"{self.name}.slot{i}", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                why = self.stopped()  # a stop written while this host waited
                if why:
                    os.close(fd)
                    return why
                os.ftruncate(fd, 0)
                os.write(fd, f"{host}\n".encode())
                self.held[host] = (fd, greenlet)
                return None
            self.sleep(POLL_S)

    def leave(self, host: str) -> None:
        fd, _ = self.held.pop(host, (None, None))
        if fd is not None:
            os.close(fd)

    def holders(self) -> list[str]:
        """Hosts of every process of the deploy holding a slot now (as each slot file names it)."""
        out = []
        for slot in sorted(self.folder.glob(f"{self.name}.slot*")):
            fd = os.open(slot, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                out.append(slot.read_text().strip())
            finally:
                os.close(fd)
        return out

    def _reap(self, is_dead: Callable[[Any], bool]) -> None:
        for host, (_, greenlet) in list(self.held.items()):
            if greenlet is not None and is_dead(greenlet):
                self.stop(host)  # its operation raised: the error is pyinfra's to show


_ROLLS: dict[str, Roll] = {}


def folder() -> Path:
    """The deploy's shared folder (LLMFLEET_ROLL_DIR), else one of this process's own."""
    shared = os.environ.get(ENV)
    if shared:
        path = Path(shared)
        path.mkdir(parents=True, exist_ok=True)
        return path
    global _own
    if _own is None:
        _own = Path(tempfile.mkdtemp(prefix="llmfleet-roll-"))
        atexit.register(shutil.rmtree, _own, True)
    return _own


_own: Path | None = None


def get(name: str, sleep: Callable[[float], Any] = time.sleep) -> Roll:
    """This process's roll called `name` (one per pyinfra run: the run is the process)."""
    if name not in _ROLLS:
        _ROLLS[name] = Roll(name, folder(), sleep)
    return _ROLLS[name]
