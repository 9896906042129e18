"""Is the probe's client the bottleneck? The offered rate it holds against a fast local endpoint, and
GuideLLM's on the same endpoint for comparison.

Starts the stand-in endpoint (llmfleet/probe/standin.py: not vLLM; 8-16 tokens a request, 1 ms
apart) in its own process on this machine, then, for each rate and repeat, runs a probe trial open
loop (Poisson arrivals, warm-up excluded) and prints offered, sent and completed rates and the
client's scheduling lag (actual send - intended send) p50 / p99 / max. With --guidellm, GuideLLM's
constant-rate profile against the same stand-in: its lag is request_start - targeted_start of each
request (its own timings), its rate what it sent per second. The machine's load average is printed
beside each run: other work on these 2 cores shows up as lag.

    .venv/bin/python benchmarks/probe_client_capacity.py [--rates 400,1000] [--duration 10] [--repeats 3] \\
        [--guidellm /path/to/venv/bin/guidellm --tokenizer MODEL_DIR]
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
import urllib.request
from pathlib import Path

from groups import run_group  # benchmarks/groups.py (this folder is on sys.path)

from llmfleet.probe import load
from llmfleet.probe.client import Endpoint
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.prompts import PromptMaker
from llmfleet.probe.stats import pct


def probe_trial(port: int, rate: float, duration: float, seed: int) -> dict:
    mix = [{"name": "small", "share": 1.0, "prompt_tokens": [16, 32], "output_tokens": [8, 16]}]
    cfg = ProbeConfig(mix=mix, slo={"e2e_p95_ms": 1000}, check_rps=1, duration_s=duration, warmup_s=2)
    ep = Endpoint(f"http://127.0.0.1:{port}", "standin", 4096, True, None, "standin")
    planned = load.plan(cfg, rate, PromptMaker(seed=seed), seed=seed)
    s = load.run_loop(load.run(ep, None, cfg, planned, rate, stop_early=False)).stats
    return {"sent": s["sent_rps"], "completed": s["completed_rps"], "errors": s["failed"], **s["lag_ms"],
            "e2e p50": s["e2e_ms"]["p50"]}


def guidellm_trial(guidellm: str, tokenizer: str, port: int, rate: float, duration: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gl.json"
        proc = run_group(
            [guidellm, "run", "--backend", f"kind=openai_http,target=http://127.0.0.1:{port},model=standin,"
             "request_format=/v1/completions", "--profile", f"kind=constant,rate={rate:g}",
             "--constraint", f"kind=max_duration,seconds={duration:g}",
             "--data", "kind=synthetic_text,prompt_tokens=24,output_tokens=12",
             "--tokenizer", f"kind=huggingface_auto,model={tokenizer}", "--output", f"kind=json,path={out}",
             "--disable-progress", "--disable-console"], cwd=tmp, timeout=600)
        if proc.returncode != 0:
            sys.exit(f"guidellm failed:\n{proc.stderr[-3000:]}")
        b = json.loads(out.read_text())["benchmarks"][0]
    reqs = b["requests"]["successful"] + b["requests"]["errored"] + b["requests"]["incomplete"]
    timings = [r["info"]["timings"] for r in reqs if r["info"]["timings"].get("request_start")]
    lags = [max(0.0, t["request_start"] - t["targeted_start"]) for t in timings]
    starts = sorted(t["request_start"] for t in timings)
    return {"sent": round((len(starts) - 1) / (starts[-1] - starts[0]), 1), "completed": None,
            "errors": len(b["requests"]["errored"]), "p50": round(pct(lags, 50) * 1000, 3),
            "p99": round(pct(lags, 99) * 1000, 3), "max": round(max(lags) * 1000, 3), "e2e p50": None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="400,700,1000")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--port", type=int, default=8398)
    ap.add_argument("--guidellm", help="GuideLLM's command (its own venv), to compare on the same stand-in")
    ap.add_argument("--tokenizer", help="With --guidellm: a model folder for its synthetic prompts")
    a = ap.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "llmfleet.probe.standin", "--port", str(a.port),
                               "--token-delay-ms", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{a.port}/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        print(f"machine: {os.cpu_count()} cores; stand-in endpoint (not vLLM) in its own process; {a.duration:g} s "
              f"measured per run, Poisson (GuideLLM: its constant profile), {a.repeats} runs per rate")
        head = (f"{'client':9} {'offered':>7} {'sent':>7} {'completed':>9} {'errors':>6} {'lag p50 ms':>10} "
                f"{'lag p99 ms':>10} {'lag max ms':>10} {'e2e p50 ms':>10} {'load avg':>8}")
        print(head)
        for rate in (float(r) for r in a.rates.split(",")):
            for i in range(a.repeats):
                runs = [("probe", lambda r=rate, i=i: probe_trial(a.port, r, a.duration, i))]
                if a.guidellm:
                    runs.append(("guidellm", lambda r=rate: guidellm_trial(a.guidellm, a.tokenizer, a.port, r,
                                                                          a.duration)))
                for name, fn in runs:
                    row = fn()
                    row |= {"client": name, "offered": rate, "load": os.getloadavg()[0]}
                    rows.append(row)
                    print(f"{name:9} {rate:7g} {row['sent']:7.1f} {_f(row['completed'], '{:9.1f}', 9)} "
                          f"{row['errors']:6d} {row['p50']:10.2f} {row['p99']:10.2f} {row['max']:10.2f} "
                          f"{_f(row['e2e p50'], '{:10.1f}', 10)} {row['load']:8.2f}", flush=True)
    finally:
        server.terminate()
        server.wait()
    print("\nmedian over the runs")
    print(f"{'client':9} {'offered':>7} {'sent':>7} {'lag p99 ms':>10} {'worst p99':>10}")
    for name in ("probe", "guidellm"):
        for rate in sorted({r["offered"] for r in rows}):
            got = [r for r in rows if r["client"] == name and r["offered"] == rate]
            if got:
                print(f"{name:9} {rate:7g} {statistics.median(r['sent'] for r in got):7.1f} "
                      f"{statistics.median(r['p99'] for r in got):10.2f} {max(r['p99'] for r in got):10.2f}")


def _f(v, fmt: str, width: int) -> str:
    return "-".rjust(width) if v is None else fmt.format(v)


if __name__ == "__main__":
    main()
