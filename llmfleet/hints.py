"""Hint files: what a run asked of each host, kept on the control machine so that the next run can
ask it all in one round trip (llmfleet/pyinfra_patches/fact_memo.py: pyinfra's facts; verify/prefetch.py: the verify
suite's commands).

A hint is only a list of what to ask, never an answer: a stale or damaged one costs a read nobody
uses, or a read of its own, never a wrong value. One file per host (and kind, and for the verify
suite per selection of checks) under $LLMFLEET_HINTS, default ~/.cache/llmfleet/hints, written
whole (a temporary file renamed over it) with mode 0600 in folders of mode 0700: what a run asks
may name paths and units, and is nobody else's to read. LLMFLEET_HINTS=off: no hints are read or
written (every read is made on its own, as pyinfra and testinfra make it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

OFF = ("off", "0", "no", "false")


def folder(kind: str) -> Path | None:
    """Where hints of `kind` ("facts", "verify") live; None when LLMFLEET_HINTS=off."""
    value = os.environ.get("LLMFLEET_HINTS", "")
    if value.lower() in OFF:
        return None
    if value:
        return Path(value) / kind
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "llmfleet" / "hints" / kind


def path_for(where: Path, host_name: str, selection: str = "") -> Path:
    """The host's hint file (a readable prefix of its name, and a hash of the whole name and the
    selection, so that two names never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", host_name)[:80]
    digest = hashlib.sha1(f"{host_name}\0{selection}".encode()).hexdigest()[:10]
    return where / f"{safe}-{digest}.json"


def load(path: Path) -> list[Any]:
    """The hint's entries; [] for a missing, unreadable or damaged file."""
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return entries if isinstance(entries, list) else []


def save(path: Path, entries: list[Any]) -> None:
    """Write the hint whole, 0600 (folders 0700); a hint that cannot be written is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=0)
        os.replace(tmp, path)
    except OSError:
        pass
