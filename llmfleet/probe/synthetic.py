"""The probe's mix as synthetic load, for a canary's window when the fleet's own traffic is too thin
for a verdict (llmfleet/rollout.py, operations/vllm_roll.py).

    python -m llmfleet.probe.synthetic < request.json

The request (on stdin, so that the API key is in no process's arguments): {"url", "model",
"api_key" (or null), "config" (a ProbeConfig: the group's probe_* settings), "rate", "duration_s",
"seed"}. It sends rate x duration_s requests of the mix, open loop (the probe's schedule and
client, llmfleet/probe/load.py), all measured, none stopped early, and prints one JSON line: the
requests sent, how many failed and why, and the client's view of TTFT and E2E, overall and by the
mix's classes (which host answered each one it does not know: the gates read both sides from
Prometheus).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys

from llmfleet.probe import load
from llmfleet.probe.client import preflight
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.prompts import PromptMaker


def run(url: str, model: str, api_key: str | None, config: ProbeConfig, rate: float, duration_s: float,
        seed: int = 0) -> dict:
    endpoint = asyncio.run(preflight(url, model, api_key, calibrate=True))
    maker = PromptMaker(None, endpoint.tokens_per_word, seed=seed)
    planned = load.plan(config, rate, maker, seed=seed, requests=max(1, math.ceil(rate * duration_s)))
    trial = load.run_loop(load.run(endpoint, api_key, config, planned, rate, stop_early=False))
    s = trial.stats
    return {"url": url, "rate": rate, "duration_s": duration_s, "requests": s["requests"], "failed": s["failed"],
            "errors": s["errors"], "ttft_ms": s["ttft_ms"], "e2e_ms": s["e2e_ms"],
            "by_class": {name: {"requests": c["requests"], "failed": c["failed"], "ttft_ms": c["ttft_ms"],
                                "e2e_ms": c["e2e_ms"]} for name, c in trial.per_class.items()}}


def main() -> None:
    req = json.loads(sys.stdin.read())
    out = run(req["url"], req["model"], req.get("api_key"), ProbeConfig.model_validate(req["config"]),
              float(req["rate"]), float(req["duration_s"]), int(req.get("seed", 0)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
