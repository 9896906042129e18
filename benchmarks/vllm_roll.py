#!/usr/bin/env python3
"""Measure vLLM on the lab: a fresh deploy to all hosts ready, a flag-change roll seen by a client,
and a no-change deploy.

    .venv/bin/python benchmarks/vllm_roll.py [--hosts 3]

On a lab of its own (own directory, subnet and names), brought down at the end. The poller asks
every host for a 1-token completion every 0.5 s during the roll; the figures are the roll's
duration, the fewest hosts answering at any moment and the longest stretch with fewer than N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENV = {"LLMFLEET_LAB_DIR": "/var/lib/llmfleet/bench-lab", "LLMFLEET_LAB_SUBNET": "10.76.0.0/24",
       "LLMFLEET_LAB_PREFIX": "llmb"}
os.environ.update(ENV)  # the poller reads the bench lab's state and key

from llmfleet.lab import poller  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.state import LabState  # noqa: E402

NEW_FLAGS = '{"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-seqs": 16}'


def timed(*args: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return time.monotonic() - started, proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=3)
    n = parser.parse_args().hosts
    llmfleet, pyinfra = str(BIN / "llmfleet"), str(BIN / "pyinfra")
    timed(llmfleet, "lab", "down")
    timed(llmfleet, "lab", "up", "--hosts", str(n))
    paths = LabPaths.from_env()
    hosts = {h.name: h.address for h in LabState.load(paths).hosts.values()}
    key = (paths.state_dir / "api-key").read_text().strip()

    first_s, out = timed(pyinfra, "inventories/lab.py", "deploy.py", "-y")
    assert all(poller.complete(a, key, "tiny-llama") == 1 for a in hosts.values())
    ready = sorted(float(line.split("ready in ")[1].split("s")[0]) for line in out.splitlines() if "ready in" in line)
    with poller.Poller(hosts, key, "tiny-llama") as watch:
        roll_s, _ = timed(pyinfra, "inventories/lab.py", "deploy.py", "-y", "--data", f"vllm_flags={NEW_FLAGS}")
        time.sleep(2)
    again_s, out = timed(pyinfra, "inventories/lab.py", "deploy.py", "-y", "--data", f"vllm_flags={NEW_FLAGS}")
    assert "vllm: restart" not in out
    timed(llmfleet, "lab", "down")
    figures = {
        "hosts": n,
        "first_deploy_to_all_ready_s": round(first_s, 1),
        "first_start_ready_s (per host)": ready,
        "flag_change_roll_s": round(roll_s, 1),
        "fewest_hosts_answering_during_roll": watch.fewest(),
        "longest_below_n_s": watch.longest_below(n),
        "poller_samples": len(watch.timeline),
        "no_change_deploy_s": round(again_s, 1),
    }
    for k, v in figures.items():
        print(f"{k}: {v}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
