#!/usr/bin/env python3
"""Audit time for 1, 4 and 12 lab container hosts, and the ratio between 12 and 1.

    .venv/bin/python benchmarks/audit_scale.py [--rounds 2]

A lab of its own (bench subnet) with 12 container hosts, deployed with the baseline (vLLM left out:
`--data vllm_enabled=False`, twelve CPU servers would not fit 2 cores; the audit is given the same
data), each onboarded fingerprint recorded; then `llmfleet audit` limited to 1, 4 and 12 hosts,
`--rounds` times each, wall time per size. Each audit: the fingerprint fact, the deploy's dry run
and the verify suite (one pytest process per host, 8 at once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENV = {**os.environ, "LLMFLEET_LAB_DIR": "/var/lib/llmfleet/bench-lab", "LLMFLEET_LAB_SUBNET": "10.76.0.0/24",
       "LLMFLEET_LAB_PREFIX": "llmb"}
DATA = ["--data", "vllm_enabled=False"]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), cwd=ROOT, env=ENV, capture_output=True, text=True)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="leave the bench lab up")
    ap.add_argument("--reuse", action="store_true",
                    help="the bench lab is already up with 12 hosts and deployed with the same data: audit only")
    a = ap.parse_args()
    llmfleet, pyinfra = str(BIN / "llmfleet"), str(BIN / "pyinfra")
    state_dir = Path(tempfile.mkdtemp(prefix="llmfleet-bench-state-"))
    out_dir = Path(tempfile.mkdtemp(prefix="llmfleet-bench-audit-"))
    if not a.reuse:
        run(llmfleet, "lab", "down")
        t0 = time.monotonic()
        run(llmfleet, "lab", "up", "--hosts", "12")
        print(f"lab of 12 containers up in {time.monotonic() - t0:.0f} s", flush=True)
        t0 = time.monotonic()
        run(pyinfra, "inventories/lab.py", "deploy.py", "-y", *DATA)
        print(f"baseline deployed to 12 hosts in {time.monotonic() - t0:.0f} s", flush=True)
    fp = run(pyinfra, "inventories/lab.py", "fact", "llmfleet.facts.HardwareFingerprint", "--json", "-y").stdout
    # pyinfra's fact JSON: {fact: {host: value}}
    for host, value in json.loads(fp[fp.index("{"):])["llmfleet.facts.HardwareFingerprint"].items():
        (state_dir / "hosts" / host).mkdir(parents=True, exist_ok=True)
        (state_dir / "hosts" / host / "fingerprint.json").write_text(json.dumps(value))
    sizes = {1: ["lab-c1"], 4: [f"lab-c{i}" for i in range(1, 5)], 12: ["lab_containers"]}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(a.rounds):
        for n, limit in sizes.items():
            t0 = time.monotonic()
            p = run(llmfleet, "audit", "inventories/lab.py", *[x for h in limit for x in ("--limit", h)],
                    "--state-dir", str(state_dir), "--out-dir", str(out_dir), *DATA, check=False)
            took = time.monotonic() - t0
            times[n].append(took)
            last = [ln for ln in p.stdout.splitlines() if " hosts: " in ln][-1:] or [p.stderr[-300:]]
            print(f"round {r + 1}: {n:2d} host(s): {took:6.1f} s, exit {p.returncode}: {last[0].strip()}", flush=True)
    print()
    for n in sizes:
        each = ", ".join(f"{t:.1f}" for t in times[n])
        print(f"{n:2d} host(s): median {statistics.median(times[n]):6.1f} s  ({each})")
    ratio = statistics.median(times[12]) / statistics.median(times[1])
    print(f"ratio 12 hosts / 1 host: {ratio:.2f} (one run, medians of {a.rounds} rounds; 2-core machine)")
    if not a.keep:
        run(llmfleet, "lab", "down")


if __name__ == "__main__":
    main()
