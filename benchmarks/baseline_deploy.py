#!/usr/bin/env python3
"""Measure the host baseline: deploy (first run, no-change run) and verify, on 1 and on 4 lab hosts.

    .venv/bin/python benchmarks/baseline_deploy.py

1 host = one container; 4 hosts = three containers and the VM (own kernel, software emulation,
so its first deploy includes a reboot and package installs under emulation). Each size gets a
fresh lab of its own (own directory, subnet and names), brought down at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENV = {**os.environ, "LLMFLEET_LAB_DIR": "/var/lib/llmfleet/bench-lab", "LLMFLEET_LAB_SUBNET": "10.76.0.0/24",
       "LLMFLEET_LAB_PREFIX": "llmb"}


def timed(*args: str) -> float:
    started = time.monotonic()
    proc = subprocess.run(list(args), cwd=ROOT, env=ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.monotonic() - started


def measure(containers: int, vm: bool) -> dict[str, float]:
    llmfleet, pyinfra, pytest = str(BIN / "llmfleet"), str(BIN / "pyinfra"), str(BIN / "pytest")
    timed(llmfleet, "lab", "down")
    timed(llmfleet, "lab", "up", "--hosts", str(containers), *(["--vm"] if vm else []))
    hosts = subprocess.run([llmfleet, "lab", "hosts"], env=ENV, capture_output=True, text=True).stdout.strip()
    figures = {
        "deploy_first_s": timed(pyinfra, "inventories/lab.py", "deploy.py", "-y"),
        "deploy_no_change_s": timed(pyinfra, "inventories/lab.py", "deploy.py", "-y"),
        "verify_s": timed(pytest, "verify/", "-q", "-p", "no:cacheprovider", f"--hosts={hosts}"),
    }
    timed(llmfleet, "lab", "down")
    return figures


def main() -> None:
    results = {"1 host (container)": measure(1, vm=False), "4 hosts (3 containers + VM)": measure(3, vm=True)}
    for label, figures in results.items():
        print(label + ": " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
