"""The throughput probe against the lab's real vLLM (CPU build, tiny model): per-host reports from
the inventory with TTFT/TPOT/E2E verdicts, goodput and the server's view, the baseline gate, a short
effective-throughput search, an overloaded trial whose report shows vLLM's queue, a Mooncake trace
replayed at its own timing (its shared hash ids hitting vLLM's prefix cache), and bad input
refused with clear messages. (verify/test_probe.py runs in test_lab.py's whole-suite verify; long searches and
the comparison with vLLM's own benchmark live in benchmarks/.)"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from harness import BIN, LAB_ENV, ROOT, run, serving_containers, state

OUT = ROOT / "reports" / "test-probe"


def containers() -> dict[str, str]:
    return serving_containers()


@pytest.fixture(scope="module")
def serving(lab, deployed):
    """Every container answering /health (the previous module ends with a restart by systemd)."""
    deadline = time.monotonic() + 600
    for name, address in containers().items():
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}:8000/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{name}: vLLM did not answer /health within 600 s"
            time.sleep(2)
    return containers()


def probe(*args: str, check: bool = False, **env: str):
    return run(str(BIN / "llmfleet"), "probe", *args, check=check, timeout=900, **env)


def test_inventory_probe_reports_every_container_host_and_gates_on_a_baseline(serving, tmp_path):
    base = tmp_path / "lab-baseline.json"
    short = ("--duration", "6", "--warmup", "2")  # 12 measured requests at 2/s (group data: 15 s + 3 s)
    p = probe("--inventory", "inventories/lab.py", "--limit", "lab_containers", "--out-dir", str(OUT),
              "--save-baseline", str(base), *short)
    out = " ".join(p.stdout.split())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    key = open(f"{LAB_ENV['LLMFLEET_LAB_DIR']}/api-key").read().strip()
    for name in serving:
        assert f"{name} model tiny-llama (check): 2 req/s offered" in out
        text = (OUT / f"{name}.json").read_text()
        assert key not in text
        doc = json.loads(text)
        o = doc["trials"][0]["overall"]
        assert doc["passed"] and o["failed"] == 0 and o["requests"] == 20  # probe_min_requests (> 6 s x 2/s)
        assert doc["method"]["prompt_lengths"] == "tokenizer"
        assert doc["method"]["output_lengths"] == "exact (ignore_eos)"
        # what was asked is what the server counted: outputs exactly (ignore_eos), prompts to within a
        # token or two (text re-encodes a little differently now and then)
        assert o["output_tokens"]["asked_mean"] == o["output_tokens"]["server_mean"]
        asked, counted = o["prompt_tokens"]["asked_mean"], o["prompt_tokens"]["server_mean"]
        assert abs(asked - counted) <= 0.01 * asked, (asked, counted)
        assert set(doc["trials"][0]["per_class"]) == {"very_short", "short", "medium", "long", "very_long"}
        # the lab's SLOs (group_data/lab.py): TTFT, TPOT and E2E overall, TTFT and E2E of very_short; each
        # verdict is the percentile the trial measured, and goodput held
        t = doc["trials"][0]
        verdicts = {(v["group"], v["slo"]): v for v in t["verdicts"]}
        assert set(verdicts) == {("overall", "ttft_p95_ms"), ("overall", "tpot_p95_ms"), ("overall", "e2e_p95_ms"),
                                 ("very_short", "ttft_p95_ms"), ("very_short", "e2e_p95_ms")}, verdicts
        assert all(v["met"] for v in verdicts.values()), verdicts
        for metric in ("ttft", "tpot", "e2e"):
            assert verdicts[("overall", f"{metric}_p95_ms")]["value_ms"] == o[f"{metric}_ms"]["p95"]
        assert o["goodput_share"] >= doc["goodput_min"] == 0.8 and o["good"] <= o["ok"]  # group_data/lab.py
        # a client that kept up reads as keeping up: every rate over the same window
        # (sent is stretched by the last request's lag: up to 0.7 s of it, on a machine where the lab's
        # servers and VM leave the client a few hundred ms late now and then, reads 1.87/s or more)
        assert o["scheduled_rps"] == 2.0 and abs(o["sent_rps"] - 2.0) < 0.14 and o["completed_rps"] == 2.0, o
        # the server's own view of the same trial: its histograms counted the requests
        server = t["server"]
        assert server["vllm_version"] == doc["target"]["server_version"] and server["samples"] >= 5
        assert server["e2e_latency_requests"] >= 24 and server["queue"]["max"] >= 0  # 4 warm-up + 20 measured
        assert doc["ceiling"] is None and "no GPU profile" in doc["ceiling_note"]
        assert (OUT / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    # the baseline just recorded (of the last host) gates the next run of that host: one the run beats
    # by far passes it, one far better than this lab can do fails it, with exit status 1 and the
    # numbers. (Not the recorded figure itself: the p95 of 12 requests is about their slowest, and on
    # this busy 2-core machine two runs a minute apart read 324 and 841 ms, past the widest tolerance
    # the setting takes, under 1: a timing, not the gate, failed.)
    last = list(serving)[-1]
    doc = json.loads(base.read_text())
    assert doc["p95_e2e_ms"] > 0, doc
    doc["p95_e2e_ms"] = 60000.0
    base.write_text(json.dumps(doc))
    p = probe("--inventory", "inventories/lab.py", "--limit", last, "--out-dir", str(OUT), "--baseline", str(base),
              *short)
    assert p.returncode == 0 and "baseline gate: pass" in p.stdout, p.stdout[-2000:]
    doc["p95_e2e_ms"] = 1.0
    base.write_text(json.dumps(doc))
    p = probe("--inventory", "inventories/lab.py", "--limit", last, "--out-dir", str(OUT), "--baseline", str(base),
              *short)
    assert p.returncode == 1
    assert "baseline gate: FAIL: P95 end-to-end" in " ".join(p.stdout.split()) and "vs baseline 1 ms" in p.stdout


def test_a_short_search_finds_an_effective_rate_with_its_bracket(serving):
    """Against the lab's own SLO (group_data/lab.py: P95 3000 ms, met at a few requests per
    second, lost long before probe_search_max_rps, 512/s, on 2 cores), so the search both passes and
    fails a rate: lab-c1 alone once served 36/s and failed 40/s; in a full run it met
    the SLO at 64/s, the old ceiling, and the search ended with no failing rate."""
    host = next(iter(serving))
    p = probe("--inventory", "inventories/lab.py", "--limit", host, "--search", "--duration", "4",
              "--warmup", "1", "--repeats", "1", "--out-dir", str(OUT))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((OUT / f"{host}.json").read_text())
    e = doc["effective"]
    trials = doc["trials"]
    assert doc["mode"] == "search" and len(trials) >= 2
    # the answer is a rate that passed, below the lowest rate that failed, which no trial passed
    assert e["rps"] is not None and e["lowest_failing_rps"] is not None, e
    assert any(t["offered_rps"] == e["rps"] and t["passed"] for t in trials), trials
    assert e["rps"] < e["lowest_failing_rps"]
    assert not any(t["passed"] for t in trials if t["offered_rps"] == e["lowest_failing_rps"])
    # bisection narrowed the bracket to the lab's probe_search_precision (0.2)
    assert (e["lowest_failing_rps"] - e["rps"]) / e["rps"] <= 0.2, e
    assert f"effective throughput: {e['rps']:g} req/s" in " ".join(p.stdout.split())
    # every failing trial says why (SLO, early stop or saturation)
    assert all(t["reasons"] for t in trials if not t["passed"])


def test_bad_input_against_the_real_server(serving):
    name, address = next(iter(serving.items()))
    url = f"http://{address}:8000"
    key = {"LLMFLEET_API_KEY": open(f"{LAB_ENV['LLMFLEET_LAB_DIR']}/api-key").read().strip()}
    cases = [
        ((url, "--model", "tiny"), key,
         f"{url}: model 'tiny' is not served there; it serves: tiny-llama (fix: --model tiny-llama)"),
        ((url, "--model", "tiny-llama"), {"LLMFLEET_API_KEY": "wrong"},
         f"{url}: refused the API key given (HTTP 401 on /v1/models)"),
        ((url, "--model", "tiny-llama"), {"LLMFLEET_API_KEY": ""}, f"{url}: refused no API key (HTTP 401"),
        ((f"http://{state()['hosts']['lab-vm1']['address']}:8000", "--model", "tiny-llama"), key, "cannot connect"),
        # the fleet's default mix asks for up to 8192 tokens; the lab serves 1024
        ((url, "--model", "tiny-llama"), key, "mix class medium: prompt up to 1536 + output up to 384 = 1920 tokens, "
                                              "beyond the served max_model_len 1024"),
        (("--inventory", "inventories/lab.py", "--limit", "lab-c7"), key, "--limit lab-c7: no such host or group"),
    ]
    for args, env, message in cases:
        p = probe(*args, "--out-dir", str(OUT), **env)
        err = " ".join(p.stderr.split())
        assert p.returncode == 2 and message in err and "Traceback" not in err, (args, p.stderr[-2000:])


def test_an_overloaded_trial_fails_and_its_report_shows_the_queue_that_caused_it(serving, tmp_path):
    """vLLM runs at most max-num-seqs requests at once (group_data/lab.py: 8; test_vllm.py's flag
    change leaves 16); 200 req/s of the lab mix for 1 s (5 times what a vLLM alone on this machine
    carried within the lab's SLOs) leaves most of them waiting in its queue."""
    name = next(iter(serving))
    out = tmp_path / "out"
    p = probe("--inventory", "inventories/lab.py", "--limit", name, "--rate", "200", "--requests", "200",
              "--no-stop-early", "--out-dir", str(out))
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / f"{name}.json").read_text())
    t = doc["trials"][0]
    server = t["server"]
    assert server["queue"]["max"] >= 1 and server["running"]["max"] <= 16, server
    cause = next(r for r in t["reasons"] if r.startswith("server: "))
    assert f"queue: up to {server['queue']['max']:g} requests waiting" in cause, t["reasons"]
    # it fails on what the overload did to the requests: a percentile over its SLO, or the goodput share
    # under the minimum (which of them depends on how fast the shared machine is that minute: one
    # fresh-clone run failed its p95 with 90 % of the requests still within every SLO)
    assert not t["passed"] and any(" > SLO " in r or r.startswith("goodput share ") for r in t["reasons"]), \
        t["reasons"]
    assert t["overall"]["goodput_share"] < 1.0, t["overall"]
    assert "server (vLLM 0.32.0 /metrics" in " ".join(p.stdout.split())


def test_a_mooncake_trace_is_replayed_at_its_timing_and_its_shared_blocks_hit_the_prefix_cache(serving, tmp_path):
    """20 requests over 9.5 s of the trace, replayed at twice its speed; every prompt starts with the
    same 512-token block (hash id 0), as a shared system prompt would."""
    name = next(iter(serving))
    gaps_ms = [0, 100, 100, 900, 50, 50, 1200, 300, 300, 300, 1000, 150, 150, 150, 1500, 500, 500, 700, 700, 850]
    lines, t = [], 0
    for i, gap in enumerate(gaps_ms):
        t += gap
        lines.append(json.dumps({"timestamp": t, "input_length": 560 + i, "output_length": 8, "hash_ids": [0, 1 + i]}))
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    p = probe("--inventory", "inventories/lab.py", "--limit", name, "--trace", str(trace), "--speed", "2",
              "--out-dir", str(out))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / f"{name}.json").read_text())
    assert doc["mode"] == "trace" and "(mooncake), at 2x its own timing" in doc["method"]["arrivals"]
    o = doc["trials"][0]["overall"]
    assert o["requests"] == 20 and o["failed"] == 0
    # the schedule is the trace's: 19 gaps over 9.5 s at 2x, so 19 / 4.75 s = 4 req/s
    assert o["scheduled_rps"] == 4.0, o
    # and it was held: every request left within the lab's client lag bound of its trace time (measured
    # P99 printed for the record)
    print(f"trace replay: client lag p50 {o['lag_ms']['p50']} ms, p99 {o['lag_ms']['p99']} ms")
    assert o["lag_ms"]["p99"] <= 1000.0 and abs(o["sent_rps"] - 4.0) < 0.4, o
    asked, counted = o["prompt_tokens"]["asked_mean"], o["prompt_tokens"]["server_mean"]
    assert abs(asked - counted) <= 0.02 * asked, (asked, counted)
    # the block every request shares was found in vLLM's prefix cache
    server = doc["trials"][0]["server"]
    assert server["prefix_cache_hits"] > 0 and server["prefix_cache_hit_rate"] > 0.3, server
