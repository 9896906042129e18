"""SLOs on TTFT, TPOT and E2E at their percentiles, per class and overall; goodput (vLLM's --goodput
definition) and the share a trial needs; the request rates of one trial over one window."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmfleet.probe import load, stats
from llmfleet.probe.client import Result
from llmfleet.probe.config import ProbeConfig, RequestClass
from llmfleet.probe.prompts import PromptMaker

MIX = [{"name": "a", "share": 0.5, "prompt_tokens": [8, 16], "output_tokens": [4, 8]},
       {"name": "b", "share": 0.5, "prompt_tokens": [32, 64], "output_tokens": [16, 32],
        "slo": {"ttft_p90_ms": 100}}]


def cfg(**kw) -> ProbeConfig:
    return ProbeConfig(**{"mix": MIX, "slo": {"e2e_p95_ms": 1000, "tpot_p50_ms": 50}, "check_rps": 2, **kw})


def req(i, cls="a", ttft=0.05, e2e=0.5, out=11, ok=True) -> Result:
    r = Result(i, cls, i * 0.5, True, 10, out, ok=ok, ttft_s=ttft if ok else None, e2e_s=e2e,
               completion_tokens=out if ok else None, prompt_tokens=10, done_s=i * 0.5 + e2e)
    if not ok:
        r.error_kind, r.error = "http", "HTTP 500"
    return r


def test_slo_keys_name_a_metric_and_a_percentile_and_bad_ones_are_refused():
    c = cfg(slo={"ttft_p99.9_ms": 300, "e2e_p95_ms": 1000, "tpot_p50_ms": 20})
    assert [(s.metric, s.q, s.limit_ms) for s in c.slos] == [("ttft", 99.9, 300), ("tpot", 50, 20), ("e2e", 95, 1000)]
    # a request of class b must meet the overall limits and its class's
    assert {s.metric: s.limit_ms for s in c.slos_of("b")} == {"ttft": 100, "tpot": 20, "e2e": 1000}
    for bad in ({"latency_p95_ms": 1}, {"e2e_p0_ms": 1}, {"e2e_p101_ms": 1}, {"e2e_95_ms": 1}, {"e2e_p95_ms": 0}):
        with pytest.raises(ValidationError):
            cfg(slo=bad)
    with pytest.raises(ValidationError, match="at least 1 item"):
        cfg(slo={})


def test_the_old_per_class_slo_name_says_what_replaced_it():
    with pytest.raises(ValidationError, match=r"slo_p95_e2e_ms = 800: renamed \(fix: slo = \{'e2e_p95_ms': 800\}"):
        RequestClass.model_validate({**MIX[0], "slo_p95_e2e_ms": 800})


def test_each_slo_is_judged_at_its_percentile_per_group():
    c = cfg()
    # class a: fine; class b: 3 of 10 with a slow first token, so its P90 TTFT fails
    rs = [req(i) for i in range(10)] + [req(10 + i, "b", ttft=0.3 if i < 3 else 0.05) for i in range(10)]
    t = load.judge(c, rs, 2.0, [], False, [])
    by = {(v["group"], v["slo"]): v for v in t.verdicts}
    assert by[("overall", "e2e_p95_ms")]["met"] and by[("overall", "e2e_p95_ms")]["value_ms"] == pytest.approx(500)
    assert by[("overall", "tpot_p50_ms")]["value_ms"] == pytest.approx((500 - 50) / 10)
    v = by[("b", "ttft_p90_ms")]
    assert not v["met"] and v["value_ms"] == pytest.approx(300) and v["requests"] == 10
    assert "class b: P90 TTFT 300 ms > SLO 100 ms" in t.reasons and not t.passed


def test_goodput_counts_requests_meeting_every_slo_of_theirs_like_vllm():
    c = cfg(goodput_min=0.9)
    rs = ([req(i) for i in range(16)]
          + [req(16, ttft=0.05, e2e=1.5)]  # E2E over the overall limit
          + [req(17, "b", ttft=0.2)]  # TTFT over its class's limit (not over any overall one)
          + [req(18, out=11, e2e=0.05 + 10 * 0.06)]  # TPOT 60 ms > 50 ms
          + [req(19, ok=False)])  # a failure is never good
    t = load.judge(c, rs, 2.0, [], False, [])
    o = t.stats
    assert (o["good"], o["goodput_share"]) == (16, 0.8)
    # over the schedule's span: 0 -> the last intended send, 9.5 s
    assert o["goodput_rps"] == pytest.approx(16 / 9.5, abs=0.001)
    assert any(r.startswith("goodput share 80.0% (16 of 20 requests met every SLO) < probe_goodput_min 90%")
               for r in t.reasons)
    # the percentile SLOs alone: P95 E2E falls on the failure, so it fails too; without goodput_min
    # the goodput share is reported but does not decide
    t = load.judge(cfg(goodput_min=None), rs, 2.0, [], False, [])
    assert t.stats["goodput_share"] == 0.8 and not any("goodput" in r for r in t.reasons)


def test_a_one_token_answer_has_no_tpot_and_meets_a_tpot_slo():
    r = req(0, out=1, e2e=0.5)
    assert r.tpot_s is None and stats.meets(r, cfg().slos)


def test_rates_of_a_client_and_server_that_keep_up_read_the_same():
    """The defect: `offered 2/s, sent 1.91/s, completed 1.94/s` for a client that kept up (different windows)."""
    c = cfg(duration_s=10, warmup_s=3, min_requests=1, slo={"e2e_p95_ms": 1000})
    planned = load.plan(c, 2.0, PromptMaker(seed=1), seed=5)
    start, end = load.span(planned)
    measured = [p for p in planned if p.measured]
    assert len(measured) == 20 and end - start == pytest.approx(20 / 2.0)  # the measured part spans n / rate
    rs = []
    for p in planned:
        r = Result(p.index, p.cls, p.intended_s, p.measured, 10, 5, ok=True, ttft_s=0.05, e2e_s=0.3,
                   completion_tokens=5, prompt_tokens=10, lag_s=0.0002)
        r.done_s = p.intended_s + 0.3
        rs.append(r)
    o = load.judge(c, rs, 2.0, [], False, [], (start, end)).stats
    assert o["scheduled_rps"] == 2.0 and o["sent_rps"] == pytest.approx(2.0, abs=0.001)
    assert o["completed_rps"] == 2.0 and o["goodput_rps"] == 2.0
    # vLLM's request throughput counts to the last end: lower by the last request's latency
    assert o["request_throughput_rps"] < 2.0


def test_early_stop_knows_a_ttft_slo_is_lost_from_requests_still_waiting_for_their_first_token():
    c = cfg(slo={"ttft_p50_ms": 100}, goodput_min=None, min_requests=10, duration_s=1, warmup_s=0)
    planned = load.plan(c, 10.0, PromptMaker(seed=0), seed=0)
    live = [Result(p.index, p.cls, p.intended_s, True, 1, 1) for p in planned]
    watch = load.SlaWatch(c, planned)
    assert watch.lost(live, 0.05) is None
    assert "P50 TTFT limit 100 ms" in watch.lost(live, 5.0)
    for r in live:  # every first token arrived in time: the same ages no longer lose it
        r.ttft_s = 0.01
    assert watch.lost(live, 5.0) is None


def test_early_stop_for_goodput_counts_finished_requests_that_missed():
    c = cfg(slo={"e2e_p50_ms": 10_000}, goodput_min=0.8, min_requests=10, duration_s=1, warmup_s=0)
    planned = load.plan(c, 10.0, PromptMaker(seed=0), seed=0)
    watch = load.SlaWatch(c, planned)
    for i in range(2):
        watch.finished(req(i, ok=False))
    assert watch.lost([], 1.0) is None  # 2 of 10 missed: 80 % can still hold
    watch.finished(req(2, ok=False))
    assert "goodput share cannot reach 0.8" in watch.lost([], 1.0)
