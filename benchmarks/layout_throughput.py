#!/usr/bin/env python3
"""Serving layouts on the lab, measured: on a lab of its own with two container hosts,
lab-c1 serves one vllm.service using both CPUs (OMP_NUM_THREADS=2), lab-c2 two instances pinned
to one CPU each behind its front door (the layout of make test's lab-c4). Same model, same mix.

    .venv/bin/python benchmarks/layout_throughput.py [--repeats 1] [--keep]

1. the move of lab-c2 from vllm.service to the layout, as a client on port 8000 sees it;
2. the effective throughput of each (llmfleet's probe search with the lab mix and SLOs, through
   port 8000: the front door on lab-c2), alternated c1, c2, c2, c1 while the other host idles;
3. the client-visible errors during a flag-change roll of each (a 1-token completion every 0.25 s
   to port 8000): without a front door (lab-c1, its one unit restarts) and with it (lab-c2, one
   instance at a time), alternated.

Prints each figure and one JSON line. The lab is brought down at the end unless --keep.
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
ENV = {"LLMFLEET_LAB_DIR": "/var/lib/llmfleet/layout-bench-lab", "LLMFLEET_LAB_SUBNET": "10.75.0.0/24",
       "LLMFLEET_LAB_PREFIX": "llml"}
os.environ.update(ENV)  # the poller and the probe read this lab's state and key

from llmfleet.lab import poller  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.state import LabState  # noqa: E402
from llmfleet.probe import fleet  # noqa: E402
from llmfleet.probe.config import ProbeConfig  # noqa: E402
from llmfleet.probe.run import run_probe  # noqa: E402

SINGLE, LAID_OUT = "lab-c1", "lab-c2"
LAYOUT = json.dumps([{"name": "a", "gpus": [], "port": 8001, "cpus": "0"},
                     {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}])
FLAGS = ['{"dtype": "float32", "max-model-len": 1024, "enforce-eager": true}',
         '{"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-seqs": 16}']


def lab_env() -> dict:
    import runpy

    return runpy.run_path(str(ROOT / "group_data" / "lab.py"))["vllm_env"]


def data(host: str, flags: str) -> list[str]:
    """The --data of a host: lab-c1 one unit on both CPUs, lab-c2 the layout, one thread an instance."""
    env = lab_env() | ({"OMP_NUM_THREADS": "2"} if host == SINGLE else {})
    out = ["--data", f"vllm_flags={flags}", "--data", f"vllm_env={json.dumps(env)}"]
    return out + (["--data", f"vllm_layout={LAYOUT}"] if host == LAID_OUT else [])


def run(*args: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return time.monotonic() - started, proc.stdout + proc.stderr


def deploy(host: str, flags: str) -> float:
    return run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", host, *data(host, flags))[0]


def watched(hosts: dict[str, str], key: str, action) -> dict:
    with poller.Poller(hosts, key, "tiny-llama", interval_s=0.25) as watch:
        time.sleep(2)
        took = action()
        time.sleep(2)
    failed = [t for t, up in watch.timeline if not up]
    return {"s": round(took, 1), "requests": len(watch.timeline), "failed": len(failed),
            "longest_without_answer_s": watch.longest_below(1)}


def search(host: str, repeats: int) -> float | None:
    (t,) = fleet.targets("inventories/lab.py", [host])
    cfg = ProbeConfig(**{**t.config.model_dump(), "repeats": repeats})
    rep = run_probe(t.url, t.model, t.api_key, cfg, search_mode=True, tokenizer=t.tokenizer, host=t.host,
                    log=lambda m: print(f"  {host}: {m}", flush=True))
    return rep.effective.rps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1, help="probe trials per rate in each search")
    ap.add_argument("--keep", action="store_true", help="leave the lab up")
    a = ap.parse_args()
    llmfleet = str(BIN / "llmfleet")
    run(llmfleet, "lab", "down")
    run(llmfleet, "lab", "up", "--hosts", "2")
    paths = LabPaths.from_env()
    hosts = {h.name: h.address for h in LabState.load(paths).hosts.values()}
    key = (paths.state_dir / "api-key").read_text().strip()
    # both serve vllm.service first (a deploy without the layout), then lab-c2 moves to the layout
    run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--data", f"vllm_flags={FLAGS[0]}")
    deploy(SINGLE, FLAGS[0])
    figures: dict = {"move_to_layout": watched({LAID_OUT: hosts[LAID_OUT]}, key, lambda: deploy(LAID_OUT, FLAGS[0]))}
    print(f"move of {LAID_OUT} to the layout, as a client sees it: {figures['move_to_layout']}", flush=True)
    rps: dict[str, list] = {SINGLE: [], LAID_OUT: []}
    for host in (SINGLE, LAID_OUT, LAID_OUT, SINGLE):
        rps[host].append(search(host, a.repeats))
        print(f"effective throughput of {host}: {rps[host][-1]} req/s", flush=True)
    figures["effective_rps"] = {"one unit, both CPUs (lab-c1)": rps[SINGLE],
                                "two pinned instances (lab-c2)": rps[LAID_OUT]}
    rolls: dict[str, list] = {SINGLE: [], LAID_OUT: []}
    for i, host in enumerate((SINGLE, LAID_OUT, LAID_OUT, SINGLE)):
        flags = FLAGS[1 - len(rolls[host]) % 2]  # each roll changes the flags of the host's last deploy
        rolls[host].append(watched({host: hosts[host]}, key, lambda h=host, f=flags: deploy(h, f)))
        print(f"roll {i + 1}, {host}: {rolls[host][-1]}", flush=True)
    figures["roll_without_front_door (lab-c1)"] = rolls[SINGLE]
    figures["roll_with_front_door (lab-c2)"] = rolls[LAID_OUT]
    if not a.keep:
        run(llmfleet, "lab", "down")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
