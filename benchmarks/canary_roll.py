#!/usr/bin/env python3
"""How long a canary rollout takes on the lab: from the deploy's start to the canary's verdict, to
the whole fleet promoted (a healthy change), and to a completed rollback (a regressed one), with an
open-loop client of the gateway counting failed requests throughout.

  healthy    vllm_flags with max-num-seqs 16 <-> 8 (group data's): lab-c1 first, at 25% then 50% of the
             gateway's requests, judged against lab-c2 and lab-c3, then promoted to them
  regressed  --regressed's flags (default max-num-seqs 1 and max-num-batched-tokens 1: one token a
             step, so prompts are prefilled a token at a time and requests wait for each other):
             lab-c1's first tokens come late under load, it fails the TTFT gate at the first step,
             and is switched back; lab-c2 and lab-c3 are never restarted

Each rollout runs with --client (default 2 req/s through lab-gw1, 1-token completions) or, with
--client 0, on an idle fleet (the canary's windows then get synthetic load). Times are read from
the deploy's output as it comes (each line stamped when read).

    .venv/bin/python benchmarks/canary_roll.py [--rounds 1] [--client 2] [--regressed JSON] [--only KIND]

Runs against the running lab (`make demo`, or `llmfleet lab up --hosts 3 --gateways 1` and a deploy),
whose directory LLMFLEET_LAB_DIR names (default the demo lab's), and its Prometheus; leaves it on
group data's flags. Evidence files go to reports/rollouts/.
"""

from __future__ import annotations

import argparse
import contextlib
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

CANARY = ["rollout_strategy=canary", "rollout_evidence_dir=reports/rollouts"]


def deploy(max_num_seqs: int, *data: str, flags_over: dict | None = None) -> tuple[int, list[tuple[float, str]]]:
    """A deploy of the container hosts with max-num-seqs changed (and `flags_over`): its exit code and
    its output lines, each with the seconds since the start at which it was read."""
    flags = runpy.run_path(str(ROOT / "group_data" / "lab.py"))["vllm_flags"] | {"max-num-seqs": max_num_seqs} \
        | (flags_over or {})
    args = [str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", "lab_containers",
            "--data", f"vllm_flags={json.dumps(flags)}"]
    for kv in data:
        args += ["--data", kv]
    t0 = time.monotonic()
    lines = []
    with subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - t0, line.rstrip()))
        code = proc.wait()
    lines.append((time.monotonic() - t0, "(exit)"))
    return code, lines


def first(lines: list[tuple[float, str]], *words: str) -> float | None:
    return next((t for t, line in lines if all(w in line for w in words)), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--client", type=float, default=2.0, help="requests per second through the gateway (0: none)")
    ap.add_argument("--regressed", default='{"max-num-seqs": 1, "max-num-batched-tokens": 1}',
                    help="vllm_flags of the regressed change, over group data's (JSON)")
    ap.add_argument("--only", choices=["healthy", "regressed"], help="one kind of rollout only")
    ap.add_argument("--data", action="append", default=[], help="KEY=VALUE over group data for every rollout")
    opts = ap.parse_args()
    regressed = json.loads(opts.regressed)
    paths = LabPaths.from_env()
    state = LabState.load(paths)
    if state is None or not any(h.role == "gateway" for h in state.hosts.values()):
        sys.exit("no lab with a gateway is up: `make demo`, or `llmfleet lab up --hosts 3 --gateways 1` and a deploy")
    key = api_key_file(paths).read_text().strip()
    gw = next(h.address for h in state.hosts.values() if h.role == "gateway")
    code, lines = deploy(8)  # group data's flags, rolling: every rollout below changes every host
    if code:
        sys.exit("the first deploy failed:\n" + "\n".join(line for _, line in lines[-40:]))
    seqs = 16
    for r in range(opts.rounds):
        order = ["healthy", "regressed"] if r % 2 == 0 else ["regressed", "healthy"]
        for kind in [k for k in order if opts.only in (None, k)]:
            client = poller.OpenLoop(gw, key, "tiny-llama", rate=opts.client) if opts.client else None
            with client if client else contextlib.nullcontext():
                code, lines = deploy(seqs, *CANARY, *opts.data, flags_over=regressed if kind == "regressed" else None)
                time.sleep(2)
            verdict = first(lines, "vllm: canary passed") if kind == "healthy" else \
                first(lines, "vllm: canary: step", "FAIL")
            end = lines[-1][0]
            back = first(lines, "vllm: canary failed:")  # logged once the cohort serves the old version again
            synthetic = sum("with synthetic load" in line for _, line in lines)
            sent = len(client.results) if client else 0
            failed = len(client.failed()) if client else 0
            ok = (code == 0) == (kind == "healthy")
            print(f"round {r + 1} {kind:9} exit {code} ({'as expected' if ok else 'UNEXPECTED'}): verdict at "
                  f"{verdict if verdict is None else round(verdict, 1)} s, "
                  + (f"fleet promoted at {end:.1f} s" if kind == "healthy" else
                     f"rollback done at {back if back is None else round(back, 1)} s (deploy ended {end:.1f} s)")
                  + f"; windows on synthetic load {synthetic}; client sent {sent}, failed {failed}", flush=True)
            if not ok:
                print("\n".join(line for _, line in lines if "vllm:" in line)[-6000:])
            if kind == "healthy" and code == 0:
                seqs = 8 if seqs == 16 else 16
    if seqs == 8:  # the last promotion went to 16: back to group data's flags
        deploy(8)


if __name__ == "__main__":
    main()
