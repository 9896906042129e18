"""A full effective-throughput search on one lab host, with the lab's group data (probe_*):
the lab mix, its SLOs, probe_duration_s trials, probe_repeats per rate.

    .venv/bin/python benchmarks/probe_search.py [--host lab-c1] [--repeats 2]

Prints every trial (rate, P95, verdict), the effective throughput with its bracket, the spread of
P95 over the repeats at that rate, and the search's wall time. Report and picture in
reports/probe-search/. Needs the demo lab up and deployed (`make demo`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from llmfleet.probe import fleet, report
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.run import run_probe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="lab-c1")
    ap.add_argument("--repeats", type=int)
    a = ap.parse_args()
    (t,) = fleet.targets("inventories/lab.py", [a.host])
    cfg = t.config if a.repeats is None else ProbeConfig(**{**t.config.model_dump(), "repeats": a.repeats})
    started = time.monotonic()
    rep = run_probe(t.url, t.model, t.api_key, cfg, search_mode=True, tokenizer=t.tokenizer, host=t.host,
                    log=lambda m: print(m, flush=True))
    took = time.monotonic() - started
    out = Path("reports/probe-search")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{t.host}.json").write_text(rep.model_dump_json(indent=2) + "\n")
    report.plot(rep, out / f"{t.host}.png")
    e = rep.effective
    print(f"\nmix: lab (5 classes), SLOs {cfg.slo} (+ per-class), goodput >= {cfg.goodput_min}, trials "
          f"{cfg.duration_s:g} s + {cfg.warmup_s:g} s warm-up, {cfg.repeats} per rate; {len(rep.trials)} trials "
          f"in {took:.0f} s")
    print(f"effective throughput: {e.rps} req/s; lowest failing {e.lowest_failing_rps} req/s; "
          f"P95 at the effective rate over the repeats: {e.p95_ms_at_effective} ms. {e.note}")
    print(f"report: {out / (t.host + '.json')}, picture: {out / (t.host + '.png')}")


if __name__ == "__main__":
    main()
