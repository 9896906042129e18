"""Shared by the benchmark scripts: a command run in a process group of its own."""

from __future__ import annotations

import os
import signal
import subprocess


def run_group(args: list[str], cwd: str, timeout: float) -> subprocess.CompletedProcess:
    """Run a command in a process group of its own and end the whole group whatever happens (GuideLLM's
    worker processes outlive a parent that is stopped alone)."""
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(args, proc.returncode, out, err)
