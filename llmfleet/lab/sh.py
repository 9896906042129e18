"""Running machine-side commands for the lab, with errors that say what failed."""

from __future__ import annotations

import shlex
import subprocess

from llmfleet.errors import LabError


def run(args: list[str], *, check: bool = True, input: str | None = None,
        timeout: float | None = 600) -> subprocess.CompletedProcess:
    """Run a command, capture its output, and raise LabError naming it on failure."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, input=input, timeout=timeout)
    except FileNotFoundError as exc:
        raise LabError(f"command not found: {args[0]} ({exc})") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"command timed out after {timeout}s: {shlex.join(args)}") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise LabError(f"command failed (exit {proc.returncode}): {shlex.join(args)}\n  "
                       + "\n  ".join(detail))
    return proc


def ok(args: list[str]) -> bool:
    """True when the command exits 0 (output discarded)."""
    try:
        return subprocess.run(args, capture_output=True, timeout=60).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


def spawn(args: list[str], log_path, marker: str, cwd=None):
    """Start a long-running process in its own session, output appended to log_path.

    cwd: run it there (the lab runs each process in a folder of its own, so that a stray one left
    by a killed run can be found by its working directory).
    Returns a Proc once the process has exec'd (its command line carries marker), so that a
    liveness check right after never mistakes the not-yet-exec'd child for a dead process.
    """
    import time
    from pathlib import Path

    from llmfleet.lab.state import Proc

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        try:
            popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError as exc:
            raise LabError(f"command not found: {args[0]}") from exc
    proc = Proc(pid=popen.pid, marker=marker)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and popen.poll() is None and not proc.alive():
        time.sleep(0.02)
    return proc


def kill_strays(under) -> list[int]:
    """End every process whose command line or working directory lies under a lab folder;
    return the PIDs that were ended.

    What a killed run can leave behind (a host whose supervisor was killed, a service whose
    state file was lost); the caller's own process is spared.
    """
    import os
    import signal
    import time
    from pathlib import Path

    prefix = str(under).rstrip("/") + "/"

    def strays() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                cwd = os.readlink(entry / "cwd") + "/"
            except OSError:
                continue
            if prefix in cmdline or cwd.startswith(prefix):
                found.append(int(entry.name))
        return found

    found = pids = strays()
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and [p for p in strays() if p in pids]:
            time.sleep(0.1)
        pids = [p for p in strays() if p in pids]
        if not pids:
            break
    if pids:
        raise LabError(f"processes under {under} survived SIGKILL: {pids}; end them by hand and retry")
    return found
