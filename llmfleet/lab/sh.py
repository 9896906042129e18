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


def spawn(args: list[str], log_path, marker: str):
    """Start a long-running process in its own session, output appended to log_path.

    Returns a Proc once the process has exec'd (its command line carries marker), so that a
    liveness check right after never mistakes the not-yet-exec'd child for a dead process.
    """
    import time
    from pathlib import Path

    from llmfleet.lab.state import Proc

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        try:
            popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError as exc:
            raise LabError(f"command not found: {args[0]}") from exc
    proc = Proc(pid=popen.pid, marker=marker)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and popen.poll() is None and not proc.alive():
        time.sleep(0.02)
    return proc
