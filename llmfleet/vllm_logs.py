"""What a vLLM server's own log says about a start: how long its weights took to load. Pure: reads
the lines llmfleet/remote/vllm_loads.py brings back from a host's journal.

The lines, the same in the versions the fleet runs (a worker writes its own, so a server with
several workers writes one each, prefixed with the process: "(Worker_TP0 pid=...)"; the slowest
counts):

- "Loading weights took 0.01 seconds": vLLM 0.19.1 vllm/model_executor/model_loader/default_loader.py:385
  and vLLM 0.32.0 (the lab's CPU build) default_loader.py:501, logger.info_once(... "%.2f seconds").
  This is the reading of the checkpoint from disk: what a slow model store makes slow.
- "Model loading took 14.7 GiB memory and 20.5 seconds" (0.19.1 vllm/v1/worker/gpu_model_runner.py:4821;
  "... GiB and ... seconds" in its vllm/v1/worker/gpu/model_runner.py:292): the whole load on a GPU
  worker, weights and set-up. The CPU build's runner does not write it (vllm/v1/worker/cpu_model_runner.py
  0.32.0 load_model).

Seen in the lab's journal (vLLM 0.32.0 CPU):
"(EngineCore pid=4649) INFO 12-02 16:11:13 [default_loader.py:501] Loading weights took 0.01 seconds".
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass

WEIGHTS = re.compile(r"Loading weights took (?P<s>[0-9]+(?:\.[0-9]+)?) seconds")
MODEL = re.compile(r"Model loading took (?P<gib>[0-9.]+) GiB(?: memory)? and (?P<s>[0-9]+(?:\.[0-9]+)?) seconds")


@dataclass(frozen=True)
class Start:
    invocation: str
    at: str  # ISO time of its first such line
    weights_s: float | None  # the slowest worker's "Loading weights took"
    model_s: float | None  # the slowest worker's "Model loading took" (GPU runners)
    workers: int  # how many workers said so

    def as_dict(self) -> dict:
        return asdict(self)


def starts(lines: list[dict]) -> list[Start]:
    """Each start's load times, oldest first (the lines of one systemd invocation are one start)."""
    by: dict[str, dict] = {}
    for line in sorted(lines, key=lambda x: x["at"]):
        w, m = WEIGHTS.search(line["message"]), MODEL.search(line["message"])
        if not (w or m):
            continue
        s = by.setdefault(line["invocation"], {"at": line["at"], "weights": [], "model": []})
        if w:
            s["weights"].append(float(w["s"]))
        if m:
            s["model"].append(float(m["s"]))
    return [Start(inv, dt.datetime.fromtimestamp(s["at"] / 1e6, dt.UTC).isoformat(timespec="seconds"),
                  max(s["weights"], default=None), max(s["model"], default=None),
                  max(len(s["weights"]), len(s["model"])))
            for inv, s in sorted(by.items(), key=lambda kv: kv[1]["at"])]


def current(unit_state: dict) -> tuple[Start | None, list[Start]]:
    """(the running start's load, every start in the journal) of one unit (vllm_loads.py's object)."""
    every = starts(unit_state.get("lines", []))
    now = next((s for s in every if s.invocation and s.invocation == unit_state.get("current")), None)
    return now, every
