#!/usr/bin/env python3
"""What the managed-files checks cost, on a deployed lab host (`llmfleet lab up`, a deploy first):

- the host's CPU for one self-audit run (llmfleet-self-audit.service's command and every process it
  waited for, under getrusage on the host), with the deploy's manifest in place ("after": every entry
  hashed and stat'ed, the drop-in chains read) and with the manifest moved aside ("before": the
  managed-files checks stop at their first read, as on a host deployed before the manifest);
- the control machine's audit of the same host (`llmfleet audit INV --limit HOST --skip config`):
  wall seconds, in the same run.

Rounds alternate the order; the manifest is put back at the end whatever happens.

    .venv/bin/python benchmarks/managed_files.py [--inventory inventories/lab.py] [--host lab-c1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmfleet import managed_files, self_audit  # noqa: E402
from llmfleet.inventory import read as read_inventory  # noqa: E402
from llmfleet.settings import validate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
ASIDE = managed_files.MANIFEST + ".benchmark-aside"
# the service's command under getrusage (as benchmarks/self_audit.py measures it)
MEASURED = ("sudo env PYTHONPATH={src} python3 -c 'import resource, subprocess, sys; "
            "r = subprocess.run(sys.argv[2:], cwd=sys.argv[1], capture_output=True); "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(u.ru_utime + u.ru_stime, r.returncode)' "
            "{src} {command}")


def ssh(host: str, command: str) -> str:
    return subprocess.run([str(BIN / "llmfleet"), "lab", "ssh", host, "--", command], capture_output=True,
                          text=True, check=True, cwd=ROOT).stdout


def self_audit_cpu(host: str, settings) -> float:
    out = ssh(host, MEASURED.format(src=self_audit.current_src(settings), command=self_audit.command(settings)))
    return float(out.split()[-2])


def control_audit_wall(inventory: str, host: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.monotonic()
        subprocess.run([str(BIN / "llmfleet"), "audit", inventory, "--limit", host, "--skip", "config",
                        "--out-dir", out], capture_output=True, cwd=ROOT)
        return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inventory", default="inventories/lab.py")
    ap.add_argument("--host", default="lab-c1")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    (found,) = [h for h in read_inventory(a.inventory, []) if h["name"] == a.host]
    settings = validate(a.host, found["data"])
    self_audit_cpu(a.host, settings)  # a first run writes the hints; the measured runs are warm
    runs: dict[str, list[float]] = {"after": [], "before": [], "control": []}
    try:
        for r in range(a.rounds):
            for kind in (("after", "before") if r % 2 == 0 else ("before", "after")):
                if kind == "before":
                    ssh(a.host, f"sudo mv {managed_files.MANIFEST} {ASIDE}")
                try:
                    runs[kind].append(self_audit_cpu(a.host, settings))
                finally:
                    if kind == "before":
                        ssh(a.host, f"sudo mv {ASIDE} {managed_files.MANIFEST}")
            runs["control"].append(control_audit_wall(a.inventory, a.host))
    finally:
        ssh(a.host, f"if sudo test -e {ASIDE}; then sudo mv {ASIDE} {managed_files.MANIFEST}; fi")
    for kind, label in (("before", "self-audit host CPU, manifest aside (before)"),
                        ("after", "self-audit host CPU, with the manifest (after)"),
                        ("control", "control audit of the same host, wall")):
        xs = runs[kind]
        print(f"{label}: median {statistics.median(xs):.2f} s ({', '.join(f'{x:.2f}' for x in xs)})")
    print(f"the manifest's checks add {statistics.median(runs['after']) - statistics.median(runs['before']):.2f} s "
          f"of host CPU to a self-audit run ({a.host}, {a.rounds} rounds, order alternated)")


if __name__ == "__main__":
    main()
