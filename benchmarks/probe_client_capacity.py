"""Is the probe's client the bottleneck? Offered rate it holds against a fast local endpoint.

Starts the stand-in endpoint (llmfleet/probe/standin.py: not vLLM, it answers in ~10 ms) in its own
process on this machine, then runs probe trials at rising offered rates, open loop, Poisson
arrivals, and prints per rate: offered, scheduled (the drawn schedule), sent and completed rates,
and the client's scheduling lag (actual send - intended send) p50 / p99 / max.

    .venv/bin/python benchmarks/probe_client_capacity.py [--rates 100,200,300] [--duration 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request

from llmfleet.probe import load
from llmfleet.probe.client import Endpoint
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.prompts import PromptMaker


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100,200,300")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--port", type=int, default=8398)
    a = ap.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "llmfleet.probe.standin", "--port", str(a.port),
                               "--token-delay-ms", "1"], stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{a.port}/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        mix = [{"name": "small", "share": 1.0, "prompt_tokens": [16, 32], "output_tokens": [8, 16]}]
        cfg = ProbeConfig(mix=mix, slo={"e2e_p95_ms": 1000}, check_rps=1, duration_s=a.duration, warmup_s=2)
        ep = Endpoint(f"http://127.0.0.1:{a.port}", "standin", 4096, True, None, "standin")
        print(f"machine: {os.cpu_count()} cores; stand-in endpoint (not vLLM) in its own process; "
              f"{a.duration:g} s measured per rate, 2 s warm-up, Poisson")
        print(f"{'offered':>8} {'scheduled':>9} {'sent':>8} {'completed':>9} {'requests':>8} {'errors':>6} "
              f"{'lag p50 ms':>10} {'lag p99 ms':>10} {'lag max ms':>10} {'e2e p50 ms':>10}")
        for rate in (float(r) for r in a.rates.split(",")):
            planned = load.plan(cfg, rate, PromptMaker(seed=1), seed=1)
            t = load.run_loop(load.run(ep, None, cfg, planned, rate, stop_early=False))
            s = t.stats
            print(f"{rate:8g} {s['scheduled_rps']:9.1f} {s['sent_rps']:8.1f} {s['completed_rps']:9.1f} "
                  f"{s['requests']:8d} {s['failed']:6d} {s['lag_ms']['p50']:10.2f} {s['lag_ms']['p99']:10.2f} "
                  f"{s['lag_ms']['max']:10.2f} {s['e2e_ms']['p50']:10.1f}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
