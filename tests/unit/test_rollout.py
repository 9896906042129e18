"""The canary's logic (llmfleet/rollout.py): the cohort's weight for a share, what makes a canary
impossible (each refused with its fix), the PromQL of each side, the gates' verdicts, the evidence."""

from __future__ import annotations

import json

import pytest

from llmfleet import rollout
from llmfleet.schema import Settings, SettingsError
from llmfleet.settings import validate

SERVING = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
CANARY = {"rollout_strategy": "canary", "rollout_prometheus_url": "http://prom.internal:9090"}


def settings(**data) -> Settings:
    return Settings(**(CANARY | data))


@pytest.mark.parametrize("share,cohort,baseline,weight", [
    (25, 1, 2, 67), (50, 1, 2, 200), (10, 1, 7, 78), (10, 2, 6, 33), (1, 1, 99, 100)])
def test_the_cohorts_weight_gives_it_the_asked_share_within_a_weight_step(share, cohort, baseline, weight):
    assert rollout.weight_for(share, cohort, baseline) == weight
    got = rollout.share_of(weight, cohort, baseline)
    # one weight step either way brackets the share asked
    assert rollout.share_of(weight - 1, cohort, baseline) <= share <= rollout.share_of(weight + 1, cohort, baseline)
    assert abs(got - share) < 1, got


def test_a_rolling_deploy_has_no_canary_problems():
    assert rollout.problems(Settings(), SERVING, [], has_gateways=False) == []


def test_a_canary_without_gateway_hosts_or_prometheus_is_refused_with_both_fixes():
    found = rollout.problems(Settings(rollout_strategy="canary"), SERVING, [], has_gateways=False)
    assert len(found) == 2
    gateways = next(p for p in found if "gateway" in p)
    assert "the inventory has no gateway hosts (group 'gateways')" in gateways and "rollout_strategy = 'rolling'" in \
        gateways
    assert any(p.startswith("rollout_strategy = 'canary' and rollout_prometheus_url = None") for p in found)


def test_the_default_cohort_is_the_first_host_without_a_layout():
    assert rollout.cohort(settings(), SERVING, ["gpu-1"]) == ["gpu-2"]


def test_a_fleet_of_layout_hosts_has_no_cohort_of_hosts_and_needs_no_gateway():
    # each layout host proves a change on its own canary instances, at its front door
    assert rollout.cohort(settings(), SERVING, SERVING) == []
    assert rollout.problems(settings(), SERVING, SERVING, has_gateways=False) == []


def test_a_cohort_host_with_a_layout_is_refused_naming_the_instance_canary():
    found = rollout.problems(settings(rollout_canary_hosts=["gpu-1"]), SERVING, ["gpu-1"], has_gateways=True)
    assert any("gpu-1 serve(s) a layout" in p and "rollout_canary_instances" in p for p in found), found


@pytest.mark.parametrize("data,names,message", [
    ({"rollout_canary_instances": ["c"]}, ["a", "b"],
     "rollout_canary_instances = ['c']: gpu-1 serves no instance c (fix: name instances of its vllm_layout, ['a', "
     "'b'], or leave it empty for the first)"),
    ({"rollout_canary_instances": ["a", "b"]}, ["a", "b"],
     "every instance of gpu-1's layout is a canary, and none is left to compare them with"),
    # one instance of two at HAProxy's highest weight, 256 against 100: 71.9% at most
    ({"rollout_steps": [25.0, 80.0]}, ["a", "b"],
     "rollout_steps = [25.0, 80.0]: a cohort of 1 instance(s) beside 1 can take at most 71.9% of the requests"),
])
def test_an_instance_canary_a_layout_host_cannot_run_is_refused_with_its_fix(data, names, message):
    found = rollout.instance_problems(settings(**data), "gpu-1", names)
    assert any(message in p for p in found), found


def test_a_layout_of_one_instance_has_no_instance_canary_and_no_problem():
    assert rollout.instance_problems(settings(rollout_canary_instances=["z"]), "gpu-1", ["a"]) == []
    assert rollout.instance_cohort(settings(), ["b", "a", "c"]) == ["a"]


def test_an_instance_side_reads_its_instances_series_and_its_front_doors_servers():
    q = rollout.queries(["gpu-1"], 30, "vllm_instances", ["a"])
    assert 'job="vllm",host=~"gpu\\\\-1",vllm_instance=~"a"' in q["ttft_p95_s"]
    assert 'job="frontdoor",host=~"gpu\\\\-1",proxy="vllm_instances",server=~"a",code="5xx"' in q["error_ratio"]
    assert 'vllm_instance=~"a"' in rollout.fleet_rate_query(["gpu-1"], 30, ["a"])


@pytest.mark.parametrize("data,message", [
    ({"rollout_canary_hosts": ["gpu-9"]}, "rollout_canary_hosts = ['gpu-9']: gpu-9 is not a serving host of the "
                                          "inventory (fix: name hosts of ['gpu-1', 'gpu-2', 'gpu-3', 'gpu-4'])"),
    ({"rollout_canary_hosts": SERVING}, "every serving host is in the cohort, and nothing is left to compare it with "
                                        "(fix: leave at least one serving host out of it)"),
    ({"rollout_steps": [25.0, 10.0]}, "rollout_steps = [25.0, 10.0]: the shares must rise, each once"),
    # one host of four at HAProxy's highest weight, 256 against 3 x 100: 46.0% at most
    ({"rollout_steps": [10.0, 60.0]}, "rollout_steps = [10.0, 60.0]: a cohort of 1 host(s) beside 3 can take at most "
                                      "46.0% of the requests (HAProxy's highest weight, 256, against 100) (fix: steps "
                                      "up to 46, or a cohort of 2 hosts)"),
    ({"rollout_synthetic_rps": 0.5, "rollout_step_s": 60},
     "rollout_synthetic_rps = 0.5: at the first step (10%) it gives the cohort about 3 requests in a window of "
     "rollout_step_s = 60, fewer than rollout_min_requests = 50 (fix: rollout_synthetic_rps = 8.5 or more"),
])
def test_a_canary_the_inventory_cannot_run_is_refused_with_its_fix(data, message):
    found = rollout.problems(settings(**data), SERVING, [], has_gateways=True)
    assert any(message in p for p in found), found


def test_the_default_cohort_is_the_first_serving_host_by_name():
    assert rollout.cohort(settings(), ["gpu-3", "gpu-1", "gpu-2"]) == ["gpu-1"]
    assert rollout.cohort(settings(rollout_canary_hosts=["gpu-3", "gpu-2"]), SERVING) == ["gpu-2", "gpu-3"]


@pytest.mark.parametrize("data,message", [
    ({"rollout_strategy": "blue"}, "rollout_strategy"),
    ({"rollout_steps": [0]}, "rollout_steps.0"),
    ({"rollout_steps": [100]}, "rollout_steps.0"),
    ({"rollout_gates": dict(Settings().rollout_gates) | {"ttft_p99_ratio": 2}}, "rollout_gates.ttft_p99_ratio"),
    ({"rollout_gates": dict(Settings().rollout_gates) | {"e2e_p95_ratio": 0.9}}, "rollout_gates.e2e_p95_ratio"),
    ({"rollout_prometheus_url": "prom:9090"}, "rollout_prometheus_url"),
])
def test_bad_rollout_settings_are_refused_naming_the_host_and_setting(data, message):
    with pytest.raises(SettingsError) as err:
        validate("gpu-7", data)
    assert str(err.value).startswith("host gpu-7: ") and message in str(err.value), str(err.value)


def test_each_side_is_read_under_every_name_vllm_gave_the_metric_and_only_its_hosts():
    q = rollout.queries(["gpu-1.dc", "gpu-2"], 30, "fleet")
    assert q["itl_p95_s"] == ('histogram_quantile(0.95, sum by (le) (increase({__name__=~"vllm:time_per_output_token_'
                              'seconds_bucket|vllm:inter_token_latency_seconds_bucket",job="vllm",host=~"gpu\\\\-1\\\\.'
                              'dc|gpu\\\\-2"}[30s])))')
    assert q["error_ratio"].startswith('sum(increase(haproxy_server_http_responses_total{job="gateway",proxy="fleet",'
                                       'server=~"gpu\\\\-1\\\\.dc|gpu\\\\-2",code="5xx"}[30s])) / ')
    assert 'vllm:gpu_cache_usage_perc|vllm:kv_cache_usage_perc' in q["kv_cache_peak"]
    assert set(q) == {"requests"} | {g.measure for g in rollout.GATES.values()}


BASE = {"requests": 40.0, "ttft_p95_s": 0.2, "itl_p95_s": 0.03, "e2e_p95_s": 1.5, "error_ratio": 0.0,
        "generated_tokens_mean": 44.0, "preemptions_per_request": 0.0, "kv_cache_peak": 0.3}
GATES = Settings().rollout_gates.model_dump()


def test_a_gate_left_out_of_group_data_keeps_its_default():
    gates = validate("gpu-7", {"vllm_enabled": False, "rollout_gates": {"e2e_p95_ratio": 2.0}}).rollout_gates
    assert gates.e2e_p95_ratio == 2.0 and gates.ttft_p95_ratio == 1.5 and gates.error_ratio_increase == 0.01


def test_a_cohort_like_its_baseline_passes_every_gate():
    verdicts = rollout.judge(GATES, BASE | {"ttft_p95_s": 0.25, "requests": 12.0}, BASE, 10)
    assert [v.gate for v in verdicts] == ["requests", *rollout.GATES] and all(v.passed for v in verdicts)


def test_a_slower_cohort_fails_the_latency_gate_with_both_sides_values():
    verdicts = rollout.judge(GATES, BASE | {"ttft_p95_s": 2.4}, BASE, 10)
    failed = [v for v in verdicts if not v.passed]
    assert [v.gate for v in failed] == ["ttft_p95_ratio"]
    assert failed[0].line() == ("FAIL ttft_p95_ratio: P95 time to first token (s): cohort 2.4, baseline 0.2 (ratio 12, "
                                "at most 1.5; slower by 2.2 s, floor 0.05 s)")


def test_a_latency_ratio_over_its_gate_but_within_its_floor_passes_and_says_so():
    # a CPU lab's inter-token P95: 9.5 ms against 35 ms, three histogram buckets apart (0.01, 0.025, 0.05)
    base, cohort = BASE | {"itl_p95_s": 0.0095}, BASE | {"itl_p95_s": 0.0354}
    itl = next(v for v in rollout.judge(GATES, cohort, base, 10) if v.gate == "itl_p95_ratio")
    assert not itl.passed  # 25.9 ms slower: over the default floor of 25 ms
    gates = GATES | {"itl_p95_ratio": 3.0, "itl_p95_floor_s": 0.05}
    itl = next(v for v in rollout.judge(gates, cohort, base, 10) if v.gate == "itl_p95_ratio")
    assert itl.passed and itl.line() == ("pass itl_p95_ratio: P95 inter-token latency (s): cohort 0.0354, baseline "
                                         "0.0095 (ratio 3.726, at most 3; slower by 0.0259 s, floor 0.05 s): within "
                                         "the floor (itl_p95_floor_s)")


def test_a_floor_of_zero_leaves_the_ratio_alone():
    cohort = BASE | {"itl_p95_s": 0.05}  # 1.67 x the baseline's 30 ms, 20 ms slower
    assert all(v.passed for v in rollout.judge(GATES, cohort, BASE, 10))  # within the default 25 ms
    failed = [v.gate for v in rollout.judge(GATES | {"itl_p95_floor_s": 0.0}, cohort, BASE, 10) if not v.passed]
    assert failed == ["itl_p95_ratio"]


@pytest.mark.parametrize("cohort,gate", [
    ({"error_ratio": 0.05}, "error_ratio_increase"),
    ({"generated_tokens_mean": 20.0}, "generated_tokens_shift"),  # answers cut short: a shift of 55%
    ({"generated_tokens_mean": 70.0}, "generated_tokens_shift"),
    ({"preemptions_per_request": 0.5}, "preemptions_per_request_increase"),
    ({"kv_cache_peak": 0.95}, "kv_cache_peak_increase"),
])
def test_each_llm_signal_has_its_gate(cohort, gate):
    verdicts = rollout.judge(GATES, BASE | cohort, BASE, 10)
    assert [v.gate for v in verdicts if not v.passed] == [gate]


def test_a_measure_one_side_did_not_observe_is_not_compared_and_says_so():
    # every request of the window asked one token: no inter-token latency on the cohort
    verdicts = rollout.judge(GATES, BASE | {"itl_p95_s": None}, BASE, 10)
    itl = next(v for v in verdicts if v.gate == "itl_p95_ratio")
    assert itl.passed and itl.line() == ("pass itl_p95_ratio: P95 inter-token latency (s): cohort none, baseline 0.03 "
                                         "(ratio none, at most 1.5): not compared: the cohort observed none in the "
                                         "window (inter-token latency: no request of more than one token)")


def test_a_cohort_whose_requests_never_reached_its_histograms_fails_on_requests():
    verdicts = rollout.judge(GATES, dict.fromkeys(BASE, None), BASE, 10)
    assert [v.gate for v in verdicts if not v.passed] == ["requests"]


def test_too_few_requests_on_either_side_is_no_verdict_but_a_failure():
    verdicts = rollout.judge(GATES, BASE | {"requests": 4.0}, BASE, 10)
    assert not verdicts[0].passed
    assert verdicts[0].line() == ("FAIL requests: requests finished in the window: cohort 4, baseline 40 (at least 10 "
                                  "each): too few for a verdict (rollout_min_requests)")


def test_the_evidence_is_json_and_a_plot(tmp_path):
    verdicts = rollout.judge(GATES, BASE | {"e2e_p95_s": 9.0}, BASE, 10)
    ev = rollout.Evidence(started=1.8e9, cohort=["gpu-1"], baseline=["gpu-2"], prometheus="http://p:9090",
                          verdict="failed",
                          steps=[rollout.Step(10, 22, 10.0, 1.8e9, 1.8e9 + 60, None, BASE | {"e2e_p95_s": 9.0}, BASE,
                                              verdicts)])
    json_path, png_path = rollout.evidence_paths(settings(rollout_evidence_dir="out"), tmp_path, ev.started, ["gpu-1"])
    assert json_path == tmp_path / "out" / "20270115T080000Z-canary-gpu-1.json"
    rollout.write(ev, json_path, png_path)
    doc = json.loads(json_path.read_text())
    assert doc["verdict"] == "failed" and doc["steps"][0]["passed"] is False
    assert [v["gate"] for v in doc["steps"][0]["verdicts"] if not v["passed"]] == ["e2e_p95_ratio"]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- per class of the probe's mix: the synthetic load's answers by side -------------------------------

def _side(ttft: list[float], failed: int = 0) -> dict:
    return {"requests": len(ttft) + failed, "failed": failed, "ttft_s": ttft, "e2e_s": [t + 0.3 for t in ttft]}


def test_a_class_slower_on_the_cohort_beyond_chance_fails_its_own_gate():
    by_side = {"cohort": {"long": _side([0.9 + 0.01 * i for i in range(25)]), "short": _side([0.05] * 25)},
               "baseline": {"long": _side([0.2 + 0.01 * i for i in range(25)]), "short": _side([0.05] * 25)}}
    verdicts = rollout.class_verdicts(GATES, by_side, 20, 0.01)
    failed = [v for v in verdicts if not v.passed]
    assert [v.gate for v in failed] == ["ttft_p95_ratio[long]", "e2e_p95_ratio[long]"]  # short is alike
    assert failed[0].line().startswith("FAIL ttft_p95_ratio[long]: class long: P95 time to first token (s): cohort "
                                       "1.128, baseline 0.428 (ratio 2.636, at most 1.5; slower by 0.7 s, floor "
                                       "0.05 s): Mann-Whitney p = ")


def test_a_class_whose_p95_moves_on_a_few_slow_answers_is_not_significant_and_passes():
    # the same distribution on both sides, but the cohort's two slowest answers are slow: its P95
    # reads far above the baseline's, its answers are not slower as a whole
    fast = [0.05 + 0.002 * i for i in range(23)]
    by_side = {"cohort": {"medium": _side(fast + [0.6, 0.7])}, "baseline": {"medium": _side(fast + [0.1, 0.1])}}
    ttft = next(v for v in rollout.class_verdicts(GATES, by_side, 20, 0.01) if v.gate == "ttft_p95_ratio[medium]")
    assert ttft.passed and ttft.value > 1.5 and "not significant: Mann-Whitney p = " in ttft.why


def test_a_class_with_too_few_answers_on_a_side_is_not_compared_and_says_so():
    by_side = {"cohort": {"very_long": _side([1.0] * 3)}, "baseline": {"very_long": _side([0.1] * 30)}}
    (v,) = rollout.class_verdicts(GATES, by_side, 20, 0.01)
    assert v.passed and v.line() == ("pass requests[very_long]: class very_long: synthetic requests in the window: "
                                     "cohort 3, baseline 30 (at least 20 each): not compared: too few on a side "
                                     "(rollout_min_class_requests)")


def test_a_class_whose_requests_fail_on_the_cohort_fails_the_error_gate():
    by_side = {"cohort": {"short": _side([0.05] * 20, failed=5)}, "baseline": {"short": _side([0.05] * 25)}}
    failed = [v.gate for v in rollout.class_verdicts(GATES, by_side, 20, 0.01) if not v.passed]
    assert failed == ["error_ratio_increase[short]"]


def test_the_synthetic_answers_go_to_the_side_whose_server_answered_them_after_the_warm_up():
    from llmfleet.probe.client import Result
    from llmfleet.probe.synthetic import by_side

    def r(cls, at, server, ok=True):
        return Result(0, cls, at, True, 10, 10, ok=ok, ttft_s=0.1 if ok else None, e2e_s=0.5 if ok else None,
                      served_by=server)
    results = [r("short", 1.0, "gpu-1"), r("short", 20.0, "gpu-1"), r("short", 20.0, "gpu-2"),
               r("long", 21.0, "gpu-3", ok=False), r("long", 22.0, None, ok=False)]  # refused: no server named
    out = by_side(results, {"cohort": ["gpu-1"], "baseline": ["gpu-2", "gpu-3"]}, window_from_s=15.0)
    assert out == {"cohort": {"short": {"requests": 1, "failed": 0, "ttft_s": [0.1], "e2e_s": [0.5]}},
                   "baseline": {"short": {"requests": 1, "failed": 0, "ttft_s": [0.1], "e2e_s": [0.5]},
                                "long": {"requests": 1, "failed": 1, "ttft_s": [], "e2e_s": []}}}
