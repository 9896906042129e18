"""Are the probe's numbers right? The probe, vLLM's own benchmark and GuideLLM on the same workload
against the same real vLLM, with the server's own /metrics as referee.

The workload (the lab's: the CPU build of vLLM serving the lab's tiny model): N requests, fixed
prompt and output lengths (vLLM's random dataset with range ratio 0; the probe's --fixed-lengths:
one greedy class; GuideLLM's synthetic data), ignore_eos, no warm-up; vLLM's benchmark and the probe
with Poisson arrivals at the rate, GuideLLM with its constant profile at the same rate (its
multi-process Poisson mode repeats its random gaps per worker). Every client runs on this
machine against the same URL (loopback: one vantage point).

Each round runs the three tools in a different order (rotated), so that the server's drift on a
shared machine does not always count against the same tool. Around each run the server's /metrics
are read: the change of its end-to-end and time-to-first-token histograms (sum / count) is the
server's own mean for exactly that run's requests, the referee of each client's mean E2E and TTFT.

Goodput agreement: vLLM's benchmark runs with --goodput (the SLO limits of --slo) and saves its
per-request results; the probe's goodput rule (llmfleet.probe.stats.meets) applied to those same
requests must count the same good requests as vLLM did.

    .venv/bin/python benchmarks/probe_vs_vllm_bench.py --url http://127.0.0.1:8017 --model tiny-llama \\
        --tokenizer MODEL_DIR --vllm-python /path/to/vllm-venv/bin/python --guidellm /path/to/guidellm \\
        [--rate 2] [--requests 60] [--rounds 3] [--api-key-file F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from groups import run_group  # benchmarks/groups.py (this folder is on sys.path)

from llmfleet.probe import server as server_view
from llmfleet.probe import stats
from llmfleet.probe.client import Result
from llmfleet.probe.config import ProbeConfig, parse_slos
from llmfleet.probe.fleet import key_from_environment, read_key_file
from llmfleet.probe.run import run_probe

BENCH = ("import sys\n"
         "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
         "from vllm.benchmarks.serve import add_cli_args, main\n"
         "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")
TOOLS = ("vllm bench", "guidellm", "probe")


def metrics(url: str, model: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return server_view.parse(text, server_view.names_for("0.32.0"), model)


def server_means(before: dict, after: dict) -> dict:
    out = {}
    for key, purpose in (("server E2E ms", "e2e_latency"), ("server TTFT ms", "ttft"),
                         ("server HTTP ms", "http_duration")):
        # a series a fresh server has not written yet (the API server's per-handler histogram appears
        # with its first completion) counts from zero
        n = after.get(f"{purpose}_count", 0) - before.get(f"{purpose}_count", 0)
        total = after.get(f"{purpose}_sum", 0) - before.get(f"{purpose}_sum", 0)
        out[key] = total / n * 1000 if n else float("nan")
    out["server requests"] = after.get("e2e_latency_count", 0) - before.get("e2e_latency_count", 0)
    return out


def vllm_bench(a, key: str | None, seed: int, slos) -> dict:
    goodput = " ".join(f"{'e2el' if s.metric == 'e2e' else s.metric}:{s.limit_ms:g}" for s in slos)
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--backend", "openai", "--base-url", a.url, "--endpoint", "/v1/completions", "--model", a.model,
                "--tokenizer", a.tokenizer, "--dataset-name", "random", "--random-input-len", str(a.input_len),
                "--random-output-len", str(a.output_len), "--random-range-ratio", "0", "--num-prompts",
                str(a.requests), "--request-rate", str(a.rate), "--burstiness", "1", "--ignore-eos",
                "--temperature", "0", "--seed", str(seed), "--num-warmups", "0", "--disable-tqdm",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--goodput", *goodput.split(), "--save-result",
                "--save-detailed", "--result-dir", tmp, "--result-filename", "bench.json"]
        env = {**os.environ, "OPENAI_API_KEY": key or ""}  # the key in the environment, never in arguments
        proc = subprocess.run([a.vllm_python, "-c", BENCH, *args], capture_output=True, text=True, env=env,
                              timeout=1800, cwd=tmp)
        if proc.returncode != 0:
            sys.exit(f"vllm bench failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        b = json.loads((Path(tmp) / "bench.json").read_text())
    # the probe's goodput rule on vLLM's own requests of this run
    good = 0
    for ttft, lat, n, err in zip(b["ttfts"], b["latencies"], b["output_lens"], b["errors"], strict=True):
        r = Result(0, "fixed", 0.0, True, a.input_len, a.output_len, ok=not err, ttft_s=ttft, e2e_s=lat,
                   completion_tokens=n)
        good += stats.meets(r, slos)
    return {"output tok/s": b["output_throughput"], "mean TTFT ms": b["mean_ttft_ms"],
            "mean E2E ms": b["mean_e2el_ms"], "completed": b["completed"],
            "vllm good": round(b["request_goodput"] * b["duration"]), "probe rule good": good}


def guidellm(a, key: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:  # mode 700: the scenario holds the key (GuideLLM 0.8.1 reads it
        out = Path(tmp) / "gl.json"             # from its backend settings only, not from the environment)
        backend = {"kind": "openai_http", "target": a.url, "model": a.model, "request_format": "/v1/completions"}
        if key:
            backend["api_key"] = key
        scenario = Path(tmp) / "scenario.json"
        scenario.touch(mode=0o600)
        scenario.write_text(json.dumps({"spec": {
            "backend": backend, "profile": {"kind": "constant", "rate": a.rate},
            "data": [{"kind": "synthetic_text", "prompt_tokens": a.input_len, "output_tokens": a.output_len}],
            "constraints": [{"kind": "max_requests", "count": a.requests}],
            "tokenizer": {"kind": "huggingface_auto", "model": a.tokenizer}}}))
        proc = run_group([a.guidellm, "run", "-c", str(scenario), "--output", f"kind=json,path={out}",
                          "--disable-progress", "--disable-console"], cwd=tmp, timeout=1800)
        if proc.returncode != 0:
            sys.exit(f"guidellm failed:\n{proc.stderr[-3000:]}")
        b = json.loads(out.read_text())["benchmarks"][0]
    ok = b["requests"]["successful"]
    if b["requests"]["errored"]:
        sys.exit(f"guidellm saw {len(b['requests']['errored'])} failed requests")
    # output tokens over its run: from the start of its schedule (its constant profile sends the first
    # request right then, the last one interval before n / rate) to the last end
    first = b["scheduler_metrics"]["start_time"]
    last = max(r["request_end_time"] for r in ok)
    return {"output tok/s": sum(r["output_tokens"] for r in ok) / (last - first), "incomplete":
            len(b["requests"]["incomplete"]),
            "mean TTFT ms": statistics.mean(r["time_to_first_token_ms"] for r in ok),
            "mean E2E ms": statistics.mean(r["request_latency"] * 1000 for r in ok), "completed": len(ok)}


def probe(a, key: str | None, seed: int, slo: dict) -> dict:
    mix = [{"name": "fixed", "share": 1.0, "prompt_tokens": a.input_len, "output_tokens": a.output_len,
            "temperature": 0.0}]
    cfg = ProbeConfig(mix=mix, slo=slo, check_rps=a.rate, warmup_s=0, seed=seed, request_timeout_s=600,
                      stall_timeout_s=120)
    rep = run_probe(a.url, a.model, key, cfg, rate=a.rate, requests=a.requests,
                    fixed={"prompt_tokens": a.input_len, "output_tokens": a.output_len}, tokenizer=a.tokenizer,
                    stop_early=False, log=lambda m: None)
    t = rep.trials[0]
    o, server = t.overall, t.server
    if o.failed:
        sys.exit(f"the probe saw {o.failed} failed requests: {o.error_examples}")
    assert server is not None
    # the referee for the probe: the same histograms, read at its trial's start and end (the reads around
    # the whole run also count the 2-token completion of its preflight)
    return {"output tok/s": o.output_tokens_per_s, "mean TTFT ms": o.ttft_ms.mean, "mean E2E ms": o.e2e_ms.mean,
            "completed": o.ok, "lag p50 ms": o.lag_ms["p50"], "good": o.good,
            "trial server E2E ms": server.e2e_latency_mean_ms, "trial server TTFT ms": server.ttft_mean_ms,
            "trial server HTTP ms": server.http_duration_mean_ms, "trial server requests": server.e2e_latency_requests}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8017")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--tokenizer", required=True, help="the served model's folder (its tokenizer)")
    ap.add_argument("--api-key-file")
    ap.add_argument("--vllm-python", required=True, help="python of a venv with vLLM (its benchmark)")
    ap.add_argument("--guidellm", required=True, help="GuideLLM's command (its own venv)")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slo", default="ttft_p95_ms=40,tpot_p95_ms=8,e2e_p95_ms=250",
                    help="the SLO limits for the goodput agreement (per request: vLLM's --goodput)")
    a = ap.parse_args()
    key = read_key_file(a.api_key_file, "--api-key-file") if a.api_key_file else key_from_environment()
    slo = {k: float(v) for k, v in (kv.split("=") for kv in a.slo.split(","))}
    slos = parse_slos(slo)
    print(f"workload: {a.requests} requests at {a.rate:g}/s (vLLM bench and probe Poisson, GuideLLM constant), "
          f"{a.input_len} prompt / {a.output_len} output tokens (ignore_eos), greedy; server {a.url} ({a.model}); "
          f"{a.rounds} rounds, the order rotated each round; goodput limits {slo}")
    rows: dict[str, list[dict]] = {t: [] for t in TOOLS}
    for r in range(a.rounds):
        order = TOOLS[r % 3:] + TOOLS[:r % 3]
        for tool in order:
            before = metrics(a.url, a.model)
            got = {"vllm bench": lambda s=r: vllm_bench(a, key, s, slos), "guidellm": lambda: guidellm(a, key),
                   "probe": lambda s=r: probe(a, key, s, slo)}[tool]()
            got |= server_means(before, metrics(a.url, a.model))
            if "trial server E2E ms" in got:  # the probe: its trial's own window, without its preflight
                for k in ("E2E", "TTFT", "HTTP"):
                    got[f"server {k} ms"] = got[f"trial server {k} ms"]
            rows[tool].append(got)
            shown = "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in got.items())
            print(f"round {r + 1} {tool:10} {shown}", flush=True)

    def mean(tool: str, key: str) -> float:
        return statistics.mean(x[key] for x in rows[tool])

    print()
    print(f"{'tool':11} {'out tok/s':>9} {'mean TTFT':>9} {'server TTFT':>11} {'diff':>6} {'mean E2E':>9} "
          f"{'server E2E':>10} {'diff':>6} {'server HTTP':>11} {'diff':>6}")
    for tool in TOOLS:
        ttft, e2e = mean(tool, "mean TTFT ms"), mean(tool, "mean E2E ms")
        print(f"{tool:11} {mean(tool, 'output tok/s'):9.2f} {ttft:9.2f} {mean(tool, 'server TTFT ms'):11.2f} "
              f"{ttft - mean(tool, 'server TTFT ms'):6.2f} {e2e:9.2f} {mean(tool, 'server E2E ms'):10.2f} "
              f"{e2e - mean(tool, 'server E2E ms'):6.2f} {mean(tool, 'server HTTP ms'):11.2f} "
              f"{e2e - mean(tool, 'server HTTP ms'):6.2f}")
    print("(ms, means over the rounds; diff: the client's mean - the server's for the same runs; server TTFT and "
          "E2E: vLLM's engine histograms, from its arrival_time; server HTTP: its API server's time per "
          "/v1/completions request, receipt to the end of the streamed answer)")
    p = mean("probe", "output tok/s")
    vb, gl = p / mean("vllm bench", "output tok/s"), p / mean("guidellm", "output tok/s")
    print(f"\noutput tok/s, probe / vLLM bench: {vb:.4f}; probe / GuideLLM: {gl:.4f} (within 2%: "
          f"{abs(vb - 1) <= 0.02 and abs(gl - 1) <= 0.02})")
    worst = max(abs(x["mean TTFT ms"] - x["server TTFT ms"]) for x in rows["probe"])
    worst_e2e = max(abs(x["mean E2E ms"] - x["server E2E ms"]) for x in rows["probe"])
    worst_http = max(abs(x["mean E2E ms"] - x["server HTTP ms"]) for x in rows["probe"])
    print(f"probe vs vLLM's engine histograms, same run, worst round: TTFT {worst:.2f} ms, E2E {worst_e2e:.2f} ms "
          f"(within 3 ms: {worst <= 3 and worst_e2e <= 3}); E2E vs its API server's own time: {worst_http:.2f} ms "
          f"(within 3 ms: {worst_http <= 3})")
    agree = all(x["vllm good"] == x["probe rule good"] for x in rows["vllm bench"])
    print("goodput on vLLM bench's own requests, vLLM's count vs the probe's rule: "
          + ", ".join(f"{x['vllm good']}/{x['probe rule good']}" for x in rows["vllm bench"])
          + f" (the same: {agree})")


if __name__ == "__main__":
    main()
