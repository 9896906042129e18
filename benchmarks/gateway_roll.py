#!/usr/bin/env python3
"""What a client loses during a flag roll of hosts without a layout: an open-loop client at 2
requests a second (completions of --max-tokens each) during each roll, in three set-ups, in turn:

  direct    the client asks lab-c1 itself; the roll drains nobody (as before the fleet gateway)
  gateway   the client asks the fleet gateway (lab-gw1); the roll drains each host there first
  checks    the client asks the gateway; the roll drains nobody (gateway_group names no host): the
            gateway's health checks alone take a restarting host out

Each roll changes vllm_flags (max-num-seqs 8 <-> 16), so every serving host restarts once a roll.

    .venv/bin/python benchmarks/gateway_roll.py [--rounds 1] [--max-tokens 1]

Runs against the running lab (`make demo`, or `llmfleet lab up --hosts 3 --gateways 1` and a deploy),
whose directory LLMFLEET_LAB_DIR names (default the demo lab's); leaves it on group data's flags.
"""

from __future__ import annotations

import argparse
import json
import runpy
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

from llmfleet.lab import poller  # noqa: E402
from llmfleet.lab.config import LabPaths  # noqa: E402
from llmfleet.lab.serving import api_key_file  # noqa: E402
from llmfleet.lab.state import LabState  # noqa: E402


def roll(max_num_seqs: int, *data: str) -> float:
    flags = runpy.run_path(str(ROOT / "group_data" / "lab.py"))["vllm_flags"] | {"max-num-seqs": max_num_seqs}
    args = [str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", "lab_containers",
            "--data", f"vllm_flags={json.dumps(flags)}"]
    for kv in data:
        args += ["--data", kv]
    started = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the roll failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=1,
                    help="tokens each request generates (ignore_eos): longer requests are in flight when a host stops")
    opts = ap.parse_args()
    paths = LabPaths.from_env()
    state = LabState.load(paths)
    if state is None or not any(h.role == "gateway" for h in state.hosts.values()):
        sys.exit("no lab with a gateway is up: `make demo`, or `llmfleet lab up --hosts 3 --gateways 1` and a deploy")
    key = api_key_file(paths).read_text().strip()
    gw = next(h.address for h in state.hosts.values() if h.role == "gateway")
    direct = state.hosts["lab-c1"].address
    setups = {"direct": (direct, ["gateway_group=no_such_group"]), "gateway": (gw, []),
              "checks": (gw, ["gateway_group=no_such_group"])}
    roll(8)  # from group data's flags (max-num-seqs 8): every roll below then restarts every host
    seqs = 16
    rows = []
    for r in range(opts.rounds):
        order = list(setups) if r % 2 == 0 else list(reversed(setups))
        for name in order:
            address, data = setups[name]
            with poller.OpenLoop(address, key, "tiny-llama", rate=2.0, max_tokens=opts.max_tokens) as client:
                seconds = roll(seqs, *data)
                time.sleep(2)
            seqs = 8 if seqs == 16 else 16
            rows.append((r + 1, name, len(client.results), len(client.failed()), round(seconds, 1),
                         sorted({str(f) for _, f in client.failed()})))
            print(f"round {r + 1} {name:8} sent {rows[-1][2]:4} failed {rows[-1][3]:4} roll {rows[-1][4]:6} s "
                  f"{rows[-1][5]}", flush=True)
    if seqs == 8:  # the last roll went to 16: back to group data's flags (max-num-seqs 8)
        roll(8)
    print("\nset-up    sent  failed  (all rounds)")
    for name in setups:
        mine = [row for row in rows if row[1] == name]
        print(f"{name:8} {sum(m[2] for m in mine):5} {sum(m[3] for m in mine):7}")


if __name__ == "__main__":
    main()
