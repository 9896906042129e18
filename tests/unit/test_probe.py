"""The probe's logic: metrics and their definitions, schedules, prompts, the search, the ceiling,
the settings it refuses, the baseline gate, the report schema."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from pydantic import ValidationError

from llmfleet.probe import ceiling, load, report, search, stats
from llmfleet.probe.client import Result
from llmfleet.probe.config import ProbeConfig, ProbeError, load_mix
from llmfleet.probe.prompts import PromptMaker
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]
MIX = [{"name": "a", "share": 0.7, "prompt_tokens": [8, 16], "output_tokens": [4, 8]},
       {"name": "b", "share": 0.3, "prompt_tokens": [32, 64], "output_tokens": [16, 32], "slo": {"e2e_p95_ms": 500}}]


def cfg(**kw) -> ProbeConfig:
    return ProbeConfig(**{"mix": MIX, "slo": {"e2e_p95_ms": 1000}, "check_rps": 2, **kw})


def result(i, e2e=0.5, ok=True, ttft=0.1, out=11, cls="a", measured=True, kind=None) -> Result:
    r = Result(i, cls, i * 0.1, measured, 10, out, ok=ok, ttft_s=ttft if ok else None, e2e_s=e2e,
               completion_tokens=out if ok else None, prompt_tokens=10 if ok else None, done_s=i * 0.1 + e2e)
    if not ok:
        r.error_kind, r.error = kind or "timeout", "x"
    return r


# ---- metrics ------------------------------------------------------------------------------------

def test_percentiles_interpolate_like_numpy_and_failures_are_worst():
    assert stats.pct([1, 2, 3, 4], 50) == 2.5
    assert stats.pct([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert stats.pct([1, 2, 3, math.inf], 50) == 2.5
    assert stats.pct([1, 2, 3, math.inf], 95) == math.inf
    assert stats.dist([1.0, 2.0, math.inf])["p95"] is None  # JSON null: the percentile fell on a failure


def test_a_failure_never_makes_a_percentile_better():
    ok = [result(i, e2e=0.1 * (i + 1)) for i in range(19)]
    before = stats.summarize(ok, 1.0, (0, 2))
    after = stats.summarize(ok + [result(19, ok=False, e2e=0.01)], 1.0, (0, 2))  # fast failure
    for q in ("p50", "p90"):
        assert after["e2e_ms"][q] >= before["e2e_ms"][q]
    assert after["e2e_ms"]["p95"] is None and after["failed"] == 1 and after["errors"] == {"timeout": 1}


def test_tpot_is_vllm_bench_definition_and_throughput_uses_server_counts():
    r = result(0, e2e=1.1, ttft=0.1, out=11)
    assert r.tpot_s == pytest.approx((1.1 - 0.1) / (11 - 1))
    assert result(1, out=1).tpot_s is None  # one token: no time per output token
    s = stats.summarize([result(0, e2e=1.0, out=10), result(10, e2e=1.0, out=30)], 1.0, (0, 1))
    # window: first intended send (0.0) -> last end (1.0 + 1.0)
    assert s["window_s"] == pytest.approx(2.0)
    assert s["output_tokens_per_s"] == pytest.approx(40 / 2.0)
    assert s["total_tokens_per_s"] == pytest.approx((40 + 20) / 2.0)


def test_warm_up_requests_are_not_measured():
    rs = [result(0, e2e=9.0, measured=False)] + [result(i, e2e=0.2) for i in range(1, 21)]
    s = stats.summarize(rs, 1.0, (0, 2))
    assert s["requests"] == 20 and s["e2e_ms"]["p99"] == pytest.approx(200.0)


# ---- schedules and prompts -----------------------------------------------------------------------

def test_poisson_schedule_has_the_rate_shares_and_ranges():
    c = cfg(duration_s=500, warmup_s=0, min_requests=1)
    planned = load.plan(c, 10.0, PromptMaker(seed=1), seed=3)
    assert len(planned) == 5000
    assert planned[-1].intended_s == pytest.approx(5000 / 10.0)  # the offered rate is exact (as vLLM bench)
    gaps = [b.intended_s - a.intended_s for a, b in zip(planned, planned[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.08)  # exponential: cv 1
    share_b = sum(p.cls == "b" for p in planned) / len(planned)
    assert share_b == pytest.approx(0.3, abs=0.02)
    assert all(32 <= p.prompt_tokens <= 64 and 16 <= p.output_tokens <= 32 for p in planned if p.cls == "b")
    assert len({p.prompt for p in planned}) == len(planned)  # no two prompts alike: no prefix-cache flattery


def test_gamma_bursts_and_warm_up_and_reproducibility():
    c = cfg(arrivals="gamma", burstiness=0.25, duration_s=400, warmup_s=10, min_requests=1)
    planned = load.plan(c, 10.0, PromptMaker(seed=1), seed=3)
    gaps = [b.intended_s - a.intended_s for a, b in zip(planned, planned[1:], strict=False)]
    cv2 = (statistics.pstdev(gaps) / statistics.mean(gaps)) ** 2
    assert cv2 == pytest.approx(1 / 0.25, rel=0.2)  # gamma shape k: squared coefficient of variation 1/k
    assert sum(not p.measured for p in planned) == 100 and all(p.measured for p in planned[100:])
    again = load.plan(c, 10.0, PromptMaker(seed=1), seed=3)
    assert [(p.intended_s, p.prompt) for p in again] == [(p.intended_s, p.prompt) for p in planned]


def test_prompts_have_the_exact_token_length_with_the_tokenizer(tmp_path):
    from llmfleet.lab.tiny_model import _tokenizer_files
    from llmfleet.probe.prompts import load_tokenizer

    _tokenizer_files(tmp_path)
    maker = PromptMaker(load_tokenizer(tmp_path), seed=2)
    assert maker.method == "tokenizer"
    for n in (1, 7, 64, 300):
        assert maker.count(maker.make(n)) == n
    with pytest.raises(ProbeError, match="no tokenizer.json there"):
        load_tokenizer(tmp_path / "missing")


# ---- search -------------------------------------------------------------------------------------

def synthetic(capacity: float, noise: float = 0.0, seed: int = 0):
    rng = random.Random(seed)
    calls = []

    def trial(rate):
        calls.append(rate)
        p95 = 100 * rate / capacity * (1 + rng.uniform(-noise, noise))
        return search.Outcome(rate, p95 <= 100, p95)
    return trial, calls


def test_search_brackets_then_bisects_to_the_precision():
    trial, calls = synthetic(37.0)
    res = search.search(trial, start=4, max_rate=512, precision=0.05, repeats=2)
    assert res.effective_rps <= 37.0 < res.lowest_failing_rps
    assert res.relative_uncertainty <= 0.05
    assert calls[:2] == [4, 4] and 64 in calls  # doubled up to the first failure, each rate twice


def test_search_goes_down_when_the_start_fails_and_says_when_nothing_passes():
    trial, _ = synthetic(1.5)
    res = search.search(trial, start=8, max_rate=64, precision=0.1, repeats=1)
    assert res.effective_rps <= 1.5 < res.lowest_failing_rps
    nothing, _ = synthetic(0.001)
    res = search.search(nothing, start=8, max_rate=64, precision=0.1, repeats=1)
    assert res.effective_rps is None and "no rate down to" in res.note


def test_a_search_from_a_rate_to_hold_ends_where_that_rate_fails_and_goes_up_where_it_holds():
    # llmfleet tune's early stop: a neighbour that cannot hold the incumbent's rate is not searched down
    weak, calls = synthetic(10.0)
    res = search.search(weak, start=16, max_rate=512, precision=0.1, repeats=1, floor=True)
    assert res.effective_rps is None and calls == [16] and res.note == "did not hold 16/s, the rate it had to hold"
    strong, calls = synthetic(40.0)
    res = search.search(strong, start=16, max_rate=512, precision=0.1, repeats=1, floor=True)
    assert calls[:2] == [16, 32] and res.effective_rps <= 40.0 < res.lowest_failing_rps


def test_search_stops_at_the_maximum_and_says_so():
    trial, _ = synthetic(1000.0)
    res = search.search(trial, start=8, max_rate=64, precision=0.1, repeats=1)
    assert res.effective_rps == 64 and res.lowest_failing_rps is None and "still met the SLO" in res.note


def test_one_failing_repeat_fails_the_rate():
    trial, _ = synthetic(20.0, noise=0.3, seed=4)
    res = search.search(trial, start=2, max_rate=512, precision=0.1, repeats=3)
    # every trial at the effective rate passed
    assert all(p <= 100 for p in res.p95_ms_at_effective) and len(res.p95_ms_at_effective) == 3


def test_saturation_is_read_from_a_growing_backlog():
    c = cfg()
    flat = [(t * 0.25, 5 + (t % 2)) for t in range(40)]
    growing = [(t * 0.25, 2 + t) for t in range(40)]
    rs = [result(i, e2e=0.2) for i in range(30)]
    assert not load.judge(c, rs, 2.0, flat, False, []).saturated
    judged = load.judge(c, rs, 2.0, growing, False, [])
    assert judged.saturated and not judged.passed and "backlog grew by 39" in judged.reasons[0]


def test_the_sla_is_judged_overall_and_per_class():
    c = cfg()
    rs = [result(i, e2e=0.3) for i in range(40)] + [result(40 + i, e2e=0.9, cls="b") for i in range(10)]
    t = load.judge(c, rs, 2.0, [], False, [])
    assert not t.passed and t.reasons[0] == "class b: P95 E2E 900 ms > SLO 500 ms"


def test_the_sla_is_lost_for_sure_once_too_many_requests_are_late():
    c = cfg(min_requests=20, duration_s=1, warmup_s=0, goodput_min=None)
    planned = load.plan(c, 20.0, PromptMaker(seed=0), seed=0)
    live = [Result(p.index, p.cls, p.intended_s, True, 1, 1) for p in planned]
    watch = load.SlaWatch(c, planned)
    assert watch.lost(live, 0.5) is None
    reason = watch.lost(live, 5.0)
    assert "more than the 0 P95 E2E allows, so it cannot hold" in reason or "so it cannot hold" in reason


# ---- ceiling (decode reads every weight byte once per step: llmfleet/probe/ceiling.py) ------------

def test_ceiling_reproduces_the_facts_file_llama2_13b_example():
    shape = ceiling.ModelShape(weight_bytes=26_000_000_000, layers=40, hidden=5120, kv_heads=40, heads=40,
                               dtype_bytes=2)
    assert shape.kv_bytes_per_token == 819_200  # 800 KB per token
    full = ceiling.ceiling(900, 8, shape.weight_bytes, shape.kv_bytes_per_token, eta=1.0)
    assert full.step_ms == pytest.approx(3.6, abs=0.05) and full.single_stream_tokens_per_s == pytest.approx(277, abs=5)
    batch = ceiling.ceiling(900, 8, shape.weight_bytes, shape.kv_bytes_per_token, batch=32, avg_context=512, eta=0.8)
    assert 4300 < batch.batch_tokens_per_s < 4800  # "~4.5k tokens/s per replica"


# ---- bad settings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,message", [
    ({"mix": [{**MIX[0], "share": 0.6}, MIX[1]]}, "mix: shares sum to 0.9, not 1 (a 0.6 + b 0.3)"),
    ({"mix": [{**MIX[0], "name": "b"}, MIX[1]]}, "class names used twice: b"),
    ({"mix": [{**MIX[0], "prompt_tokens": [16, 8]}, MIX[1]]}, "min 16 is above max 8"),
    ({"burstiness": 0.5}, "Poisson arrivals have burstiness 1"),
    ({"search_start_rps": 100, "search_max_rps": 10}, "search_start_rps = 100.0 is above search_max_rps"),
])
def test_bad_probe_config_is_refused(kw, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        cfg(**kw)


def _defaults(**override) -> dict:
    data = {k: v for k, v in schema_defaults().items() if not k.startswith("__")}
    model = {"name": "m", "version": "1", "source": "hf://org/m", "revision": "0" * 40, "torch_dtype": "float16",
             "num_attention_heads": 40}
    return data | {"vllm_model": model} | override


def test_group_data_defaults_are_valid_and_fit_the_context():
    validate("gpu-1", _defaults())


@pytest.mark.parametrize("override,message", [
    ({"probe_mix": [{**MIX[0], "share": 0.5}]}, "host gpu-1: probe_mix: shares sum to 0.5, not 1"),
    ({"vllm_flags": {"dtype": "half", "tensor-parallel-size": 8, "max-model-len": 4096}},
     "probe_mix: mix class long: prompt up to 4096 + output up to 768 = 4864 tokens, beyond "
     "vllm_flags.max-model-len = 4096"),
    ({"probe_arrivals": "poisson", "probe_burstiness": 0.5}, "probe_burstiness = 0.5: Poisson arrivals"),
    ({"probe_check_rps": 0}, "probe_check_rps = 0: Input should be greater than 0"),
])
def test_bad_probe_group_data_stops_before_any_host(override, message):
    with pytest.raises(SettingsError) as exc:
        validate("gpu-1", _defaults(**override))
    assert message in str(exc.value)


def test_mix_files_are_checked(tmp_path):
    f = tmp_path / "mix.yaml"
    f.write_text("- {name: a, share: 0.5, prompt_tokens: [1, 2], output_tokens: [1, 2]}\n")
    with pytest.raises(ProbeError, match=r"--mix .*mix.yaml: mix: shares sum to 0.5, not 1"):
        load_mix(f)
    f.write_text("- {name: a, share: 1, prompt_tokens: [1, 2], output_tokens: [1, 2], temprature: 1}\n")
    with pytest.raises(ProbeError, match=r"mix\[0\].temprature = 1: Extra inputs are not permitted"):
        load_mix(f)
    with pytest.raises(ProbeError, match="cannot be read"):
        load_mix(tmp_path / "none.json")


# ---- report, gate, schema ------------------------------------------------------------------------------

def _report(mode="check", p95_ms=400.0, effective=None) -> report.ProbeReport:
    rs = [result(i, e2e=p95_ms / 1000) for i in range(20)]
    t = load.judge(cfg(), rs, 2.0, [], False, [])
    eff = report.Effective(rps=effective, lowest_failing_rps=None, relative_uncertainty=None,
                           p95_ms_at_effective=[], note="") if mode == "search" else None
    return report.ProbeReport(created="x", target={"model": "m", "url": "u", "host": "h"}, method={},
                              definitions=report.DEFINITIONS, slo={"e2e_p95_ms": 1000}, goodput_min=0.9,
                              mix=cfg().mix, mode=mode,
                              trials=[report.trial_report(t)], effective=eff, ceiling=None, ceiling_note="",
                              gate=None, passed=True, reasons=[])


def test_baseline_gate(tmp_path):
    base = tmp_path / "base.json"
    report.save_baseline(_report(p95_ms=400), base)
    assert report.gate(_report(p95_ms=440), base, 0.15).passed
    slow = report.gate(_report(p95_ms=500), base, 0.15)
    assert not slow.passed and "P95 end-to-end 500 ms at 2.0 req/s vs baseline 400 ms (at most 460 ms)" in slow.message
    report.save_baseline(_report("search", effective=20.0), base)
    assert report.gate(_report("search", effective=18.0), base, 0.15).passed
    assert not report.gate(_report("search", effective=16.0), base, 0.15).passed
    other = _report("search", effective=20.0)
    other.target["model"] = "other"
    assert "not comparable" in report.gate(other, base, 0.15).message
    with pytest.raises(ProbeError, match="cannot be read"):
        report.gate(_report(), tmp_path / "none.json", 0.15)


def test_report_schema_document_is_current():
    assert (ROOT / "docs" / "probe-report.schema.json").read_text() == report.schema_json(), \
        "regenerate: python -c 'from llmfleet.probe.report import schema_json; print(schema_json(), end=\"\")' " \
        "> docs/probe-report.schema.json"


def test_report_round_trips_as_json_and_plots(tmp_path):
    rep = _report()
    again = report.ProbeReport.model_validate(json.loads(rep.model_dump_json()))
    assert again.trials[0].overall.e2e_ms.p95 == pytest.approx(400.0)
    report.plot(rep, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_a_targets_repr_never_shows_its_api_key():
    # pytest prints reprs of locals in a failure: the key must not reach a CI log
    from llmfleet.probe.fleet import Target

    t = Target("lab-c1", "http://10.0.0.1:8000", "m", "sk-secret-123", None, None, None, None, None, 1, None)
    assert "sk-secret-123" not in repr(t) and t.api_key == "sk-secret-123"
