#!/usr/bin/env python3
"""`llmfleet tune` against the exhaustive grid on a lab host: the same space measured both ways,
best effective throughput and server starts of each.

  tuner  llmfleet/probe/tune_host.py run: hill climbing from the configured state with the early stop
         (a neighbour must hold the incumbent's rate), the best measured again (tune_top,
         tune_repeats), a journal of its own
  grid   every candidate of the space deployed and searched in full (the probe's search from
         probe_search_start_rps), as vLLM's auto_tune.sh, `vllm bench sweep` and llm-optimizer do;
         its best measured again as often as the tuner's, so both report a mean of as many searches

The space: max-num-seqs 4, 8, 16 x max-num-batched-tokens vLLM's default or 4096 x two layouts
(two instances pinned one to a CPU, or one on both): 12 candidates. Both run with the same probe
settings (short trials: the lab's tiny model), one after the other (--order), on a host the lab's
gateway fronts (held out of it while they run), laid out as two instances first.

    .venv/bin/python benchmarks/tune_vs_grid.py [--host lab-c2] [--order tuner,grid]

Runs against the running lab (`make demo`, or `llmfleet lab up --hosts 2 --gateways 1` and a deploy);
leaves the host on its two instances. Figures: docs/measurements.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmfleet import tune  # noqa: E402
from llmfleet.probe import tune_host  # noqa: E402
from llmfleet.probe.config import from_settings  # noqa: E402

TWO = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0"}, {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}]
ONE = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0-1"}]
SPACE = {"flags": {"max-num-seqs": [4, 8, 16], "max-num-batched-tokens": [None, 4096]}, "layouts": [TWO, ONE]}
PROBE = ["probe_duration_s=4", "probe_warmup_s=1", "probe_repeats=1", "probe_min_requests=5",
         "probe_search_precision=0.2", "probe_search_start_rps=8"]
DATA = ["vllm_layout=" + json.dumps(TWO), "tune_space=" + json.dumps(SPACE), *PROBE, "tune_top=2", "tune_repeats=1",
        "tune_max_starts=16"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def tuner(th: tune_host.TuneHost, config, out: Path) -> dict:
    t0 = time.monotonic()
    doc = tune_host.run(th, config, out)
    w = doc["winner"] or {}
    return {"method": "tuner", "best": w.get("candidate"), "best_rps": w.get("effective_rps_mean"),
            "interval": w.get("half_width_95"), "starts": doc["starts"], "trials": len(doc["trials"]),
            "seconds": round(time.monotonic() - t0, 1)}


def grid(th: tune_host.TuneHost, config, out: Path) -> dict:
    t0 = time.monotonic()
    journal = tune.Journal(out / f"{th.name}.journal.jsonl")
    probe = tune_host.prober(th, config, {}, lambda: "stopped")
    tune_host.hold(th)
    try:
        assert tune_host.deploy(th, None) == ""
        for c in th.space.grid():
            if c.key not in journal.trials:
                journal.record(tune_host.measure(th, probe, c, None))
                t = journal.trials[c.key]
                log(f"grid: {t.status}: {c.describe()} {t.effective_rps} {t.reason[:100]}")
        best = tune.ranked(journal.trials.values())
        top = best[:th.settings.tune_top]
        for t in top:  # measured again as often as the tuner measures its best
            c = next(x for x in th.space.grid() if x.key == t.key)
            if th.needs_deploy(c):
                t.starts += 1 if tune_host.deploy(th, c) == "" else 0
            rep = probe(t.effective_rps, floor=False)
            t.repeats.append((rep.effective.rps or 0.0) if rep.effective else 0.0)
            journal.record(t)
    finally:
        tune_host.put_back(th)
    winner = tune.ranked(journal.trials.values())[0]
    mean, half = tune.figures(winner)
    return {"method": "grid", "best": winner.candidate, "best_rps": round(mean, 4), "interval": round(half, 4),
            "starts": journal.starts, "trials": len(journal.trials), "seconds": round(time.monotonic() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="lab-c2")
    ap.add_argument("--order", default="tuner,grid")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "tune-bench")
    args = ap.parse_args()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    log(f"{args.host}: laid out as two instances first (the configured state of both runs)")
    subprocess.run([sys.executable, "-m", "pyinfra", "inventories/lab.py", "deploy.py", "-y", "--limit", args.host,
                    "--data", DATA[0]], cwd=ROOT, check=True, capture_output=True)
    results = []
    for method in args.order.split(","):
        th = tune_host.prepare("inventories/lab.py", args.host, DATA, False, log=log)
        out = args.out / f"{stamp}-{method}"
        out.mkdir(parents=True, exist_ok=True)
        results.append(tuner(th, from_settings(th.settings), out) if method == "tuner"
                       else grid(th, from_settings(th.settings), out))
        log(json.dumps(results[-1]))
    by = {r["method"]: r for r in results}
    print(f"{'method':6} {'best effective req/s':>22} {'+/-':>6} {'server starts':>14} {'trials':>7} "
          f"{'seconds':>8}  best")
    for r in results:
        print(f"{r['method']:6} {r['best_rps']:>22} {r['interval']:>6} {r['starts']:>14} {r['trials']:>7} "
              f"{r['seconds']:>8}  {r['best']}")
    if {"tuner", "grid"} <= set(by):
        g, t = by["grid"], by["tuner"]
        print(f"tuner's best / grid's best: {t['best_rps'] / g['best_rps']:.3f}; tuner's starts / grid's starts: "
              f"{t['starts'] / g['starts']:.2f}")
    (args.out / f"{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
