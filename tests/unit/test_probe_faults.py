"""Server faults and bad input, over real HTTP: the probe against the stand-in endpoint
(llmfleet/probe/standin.py, NOT vLLM: it misbehaves on demand). Each fault gets a clear message
or is counted in the report, never a traceback or a silent zero. The same client runs against
the lab's real vLLM in tests/integration/test_probe.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from llmfleet.probe.config import ProbeConfig, ProbeError
from llmfleet.probe.run import run_probe

BIN = Path(sys.executable).parent
MIX = [{"name": "a", "share": 1.0, "prompt_tokens": [4, 8], "output_tokens": [6, 8]}]
CFG = ProbeConfig(mix=MIX, slo={"e2e_p95_ms": 2000}, check_rps=20, duration_s=1, warmup_s=0, min_requests=20,
                  request_timeout_s=5, stall_timeout_s=0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def standin(tmp_path):
    procs = []

    def start(fault="none", key=None, max_model_len=4096):
        port = free_port()
        args = [sys.executable, "-m", "llmfleet.probe.standin", "--port", str(port), "--fault", fault,
                "--max-model-len", str(max_model_len)]
        if key:
            kf = tmp_path / "server-key"
            kf.write_text(key)
            args += ["--api-key-file", str(kf)]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.05)
                continue
            break
        return f"http://127.0.0.1:{port}"
    yield start
    for p in procs:
        p.kill()  # a stalled handler would hold aiohttp's graceful shutdown for a minute
        p.wait()


def probe(url, **kw):
    return run_probe(url, kw.pop("model", "standin"), kw.pop("key", None), kw.pop("config", CFG), log=lambda m: None,
                     **kw)


def test_a_healthy_endpoint_passes_with_exact_lengths(standin):
    rep = probe(standin())
    t = rep.trials[0].overall
    assert rep.passed and t.failed == 0 and t.requests == 20
    assert t.output_tokens["asked_mean"] == t.output_tokens["server_mean"]
    assert rep.method["output_lengths"] == "exact (ignore_eos)"
    assert rep.method["prompt_lengths"] == "words, calibrated with the server's /tokenize"
    # the stand-in is not vLLM: no /version, so no metric names to read its /metrics by, and the report says so
    assert rep.method["server_view"].startswith("not sampled: the server has no /version")
    assert rep.trials[0].server is None


def test_unreachable_endpoint():
    with pytest.raises(ProbeError, match=r"http://127.0.0.1:\d+: cannot connect .*fix: check the URL and port"):
        probe(f"http://127.0.0.1:{free_port()}")


def test_wrong_model_name(standin):
    with pytest.raises(ProbeError,
                       match=r"model 'llama' is not served there; it serves: standin \(fix: --model standin\)"):
        probe(standin(), model="llama")


def test_wrong_or_missing_api_key(standin):
    url = standin(key="right-key")
    with pytest.raises(ProbeError, match=r"refused the API key given \(HTTP 401 on /v1/models\)"):
        probe(url, key="wrong-key")
    with pytest.raises(ProbeError, match=r"refused no API key"):
        probe(url)
    assert probe(url, key="right-key").passed


def test_lengths_beyond_the_served_context_are_refused_before_any_load(standin):
    with pytest.raises(ProbeError, match=r"mix class a: prompt up to 8 \+ output up to 8 = 16 tokens, beyond the "
                                         r"served max_model_len 12"):
        probe(standin(max_model_len=12))


@pytest.mark.parametrize("fault,kind,example", [
    ("stall", "stall", "the stream stalled: nothing for 0.5 s after 2 chunk(s)"),
    ("malformed", "malformed", "malformed stream chunk (not a JSON object): b'{not json'"),
    ("http500", "http", "HTTP 500: internal error"),
])
def test_server_faults_are_counted_against_the_sla(standin, fault, kind, example):
    rep = probe(standin(fault))
    t = rep.trials[0].overall
    assert not rep.passed
    # every measured request counted as failed: by the fault, or cancelled / never sent once the
    # trial stopped early because the SLA was already lost
    assert t.failed == t.requests == 20 and sum(t.errors.values()) == 20
    assert t.errors[kind] >= 1 and set(t.errors) <= {kind, "cancelled", "not_sent"}
    assert t.error_examples[kind] == example
    assert t.e2e_ms.p50 is None  # failures sit above every latency, never dropped
    assert any("P95 end-to-end failed requests > SLO" in r or "stopped early" in r for r in rep.reasons)


def test_a_server_without_usage_or_ignore_eos_is_measured_and_labelled(standin):
    rep = probe(standin("no_usage"))
    assert rep.passed and rep.trials[0].overall.token_count_method == "chunks (the server sent no usage)"
    rep = probe(standin("reject_ignore_eos"))
    assert rep.passed and rep.method["output_lengths"].startswith("caps: the server refused ignore_eos")


def test_a_slow_server_stops_the_trial_early(standin):
    config = ProbeConfig(**{**CFG.model_dump(), "slo": {"e2e_p95_ms": 50}, "duration_s": 10, "min_requests": 200})
    started = time.monotonic()
    rep = probe(standin("slow"), config=config)
    assert not rep.passed and rep.trials[0].stopped_early
    assert "the P95 E2E limit 50 ms" in rep.reasons[0] and "so it cannot hold" in rep.reasons[0]
    assert time.monotonic() - started < 8  # not waited out (10 s of schedule)
    assert rep.trials[0].overall.errors.get("not_sent", 0) > 0  # what was never sent counts too


def run_cli(*args, env=None):
    return subprocess.run([str(BIN / "llmfleet"), "probe", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_cli_end_to_end_report_and_exit_status(standin, tmp_path):
    url = standin(key="k1")
    keyfile = tmp_path / "key"
    keyfile.write_text("k1\n")
    keyfile.chmod(0o644)
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps(MIX))
    args = [url, "--model", "standin", "--mix", str(mix), "--rate", "10", "--requests", "20", "--out-dir",
            str(tmp_path / "out"), "--slo", "e2e_p95_ms=2000"]
    p = run_cli(*args, "--api-key-file", str(keyfile))
    assert p.returncode == 2 and f"--api-key-file = '{keyfile}': readable by others (mode 644) (fix: chmod 600" \
        in p.stderr and "Traceback" not in p.stderr
    keyfile.chmod(0o600)
    p = run_cli(*args, "--api-key-file", str(keyfile))
    assert p.returncode == 0, p.stderr
    assert "PASS" in p.stdout and "latencies in ms from the intended send time" in p.stdout
    name = url.split("//")[1].replace(":", "_")
    doc = json.loads((tmp_path / "out" / f"{name}.json").read_text())
    assert doc["schema_id"] == "llmfleet-probe/2" and doc["trials"][0]["overall"]["requests"] == 20
    assert "k1" not in (tmp_path / "out" / f"{name}.json").read_text()  # the key is in no report
    assert (tmp_path / "out" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    # the key from the environment works too; a mix that does not add up is refused before any request
    p = run_cli(*args, env={"LLMFLEET_API_KEY": "k1"})
    assert p.returncode == 0, p.stderr
    mix.write_text(json.dumps([{**MIX[0], "share": 0.8}]))
    p = run_cli(*args, env={"LLMFLEET_API_KEY": "k1"})
    assert p.returncode == 2 and "mix: shares sum to 0.8, not 1 (a 0.8) (fix: make the shares add up to 1)" in p.stderr
    p = run_cli(url, "--model", "standin", "--search", "--requests", "5")
    assert p.returncode == 2 and "--requests 5 with --search" in p.stderr


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_probe_early_with_a_report_of_what_it_sent(standin, tmp_path, sig):
    """A roll watched by the probe ends when the roll does (tests/integration/test_layout.py), and an
    operator's Ctrl-C keeps what was measured: no request after the signal, those in flight finish,
    the report says so and judges what was sent."""
    import signal

    url = standin()
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps(MIX))
    proc = subprocess.Popen([str(BIN / "llmfleet"), "probe", url, "--model", "standin", "--mix", str(mix), "--rate",
                             "10", "--duration", "600", "--warmup", "0", "--out-dir", str(tmp_path / "out"), "--slo",
                             "e2e_p95_ms=2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)  # the preflight, then about 2 s of the trial
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    doc = json.loads((tmp_path / "out" / f"{url.split('//')[1].replace(':', '_')}.json").read_text())
    overall = doc["trials"][0]["overall"]
    assert 5 <= overall["requests"] < 100 and overall["failed"] == 0, overall  # not the 6000 planned
    assert doc["method"]["stopped"].startswith("by a signal") and doc["passed"], doc["method"]
