"""The probe's mix as synthetic load, for a canary's window when the fleet's own traffic is too thin
for a verdict (llmfleet/rollout.py, operations/vllm_roll.py).

    python -m llmfleet.probe.synthetic < request.json

The request (on stdin, so that the API key is in no process's arguments): {"url", "model",
"api_key" (or null), "config" (a ProbeConfig: the group's probe_* settings), "rate", "duration_s",
"seed", and for the per-class gates "sides" ({"cohort": [server names], "baseline": [...]}) and
"window_from_s" (the warm-up: requests intended before it are left out of "by_side")}. It sends
rate x duration_s requests of the mix, open loop (the probe's schedule and client,
llmfleet/probe/load.py), all measured, none stopped early, each with rollout.SYNTHETIC_HEADER, and
prints one JSON line: the requests sent, how many failed and why, the client's view of TTFT and E2E
overall and by the mix's classes, and "by_side": for each side, each class's requests in the window
that the gateway or front door says a server of that side answered (rollout.SERVED_BY_HEADER),
with their TTFT and E2E (s) and how many failed.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys

from llmfleet.probe import load
from llmfleet.probe.client import Result, preflight
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.prompts import PromptMaker
from llmfleet.rollout import SYNTHETIC_HEADER


def run(url: str, model: str, api_key: str | None, config: ProbeConfig, rate: float, duration_s: float,
        seed: int = 0, sides: dict[str, list[str]] | None = None, window_from_s: float = 0.0) -> dict:
    endpoint = asyncio.run(preflight(url, model, api_key, calibrate=True))
    maker = PromptMaker(None, endpoint.tokens_per_word, seed=seed)
    planned = load.plan(config, rate, maker, seed=seed, requests=max(1, math.ceil(rate * duration_s)))
    trial = load.run_loop(load.run(endpoint, api_key, config, planned, rate, stop_early=False,
                                   extra_headers={SYNTHETIC_HEADER: "1"}))
    s = trial.stats
    return {"url": url, "rate": rate, "duration_s": duration_s, "requests": s["requests"], "failed": s["failed"],
            "errors": s["errors"], "ttft_ms": s["ttft_ms"], "e2e_ms": s["e2e_ms"],
            "by_class": {name: {"requests": c["requests"], "failed": c["failed"], "ttft_ms": c["ttft_ms"],
                                "e2e_ms": c["e2e_ms"]} for name, c in trial.per_class.items()},
            "by_side": by_side(trial.results, sides or {}, window_from_s)}


def by_side(results: list[Result], sides: dict[str, list[str]], window_from_s: float) -> dict[str, dict[str, dict]]:
    """Each side's answers by class, from `window_from_s` on: those the load balancer says a server
    of the side answered (Result.served_by); an answer no side's server gave (a refused connection
    names none) is left out."""
    side_of = {name: side for side, names in sides.items() for name in names}
    out: dict[str, dict[str, dict]] = {side: {} for side in sides}
    for r in results:
        side = side_of.get(r.served_by or "")
        if side is None or r.intended_s < window_from_s:
            continue
        c = out[side].setdefault(r.cls, {"requests": 0, "failed": 0, "ttft_s": [], "e2e_s": []})
        c["requests"] += 1
        if r.ok and r.ttft_s is not None and r.e2e_s is not None:
            c["ttft_s"].append(round(r.ttft_s, 4))
            c["e2e_s"].append(round(r.e2e_s, 4))
        else:
            c["failed"] += 1
    return out


def main() -> None:
    req = json.loads(sys.stdin.read())
    out = run(req["url"], req["model"], req.get("api_key"), ProbeConfig.model_validate(req["config"]),
              float(req["rate"]), float(req["duration_s"]), int(req.get("seed", 0)), req.get("sides"),
              float(req.get("window_from_s", 0.0)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
