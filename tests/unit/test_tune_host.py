"""llmfleet tune's host part without a host (llmfleet/probe/tune_host.py): the refusals before anything
is touched (on the example production inventory, read by pyinfra without connecting), each
candidate's validation and deploy data, a failed deploy's reason, a probe report judged as a trial,
and --confirm's outliers. The lab runs the whole tune on a real vLLM (tests/integration/test_tune.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from llmfleet import tune
from llmfleet.probe import tune_host
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import validate

PROD = "inventories/prod.py"
HOST = "gpu-sxm-01.example.internal"
SPACE = {"flags": {"max-num-seqs": [64, 128]}, "layouts": ["1x8", "2x4"]}
FLAGS = {"flags": {"max-num-seqs": [64, 128]}}


def space_data(space=SPACE) -> str:
    return "tune_space=" + json.dumps(space)


@pytest.mark.parametrize("host,data,out_of_service,message", [
    ("gpu-sxm-09", [space_data()], True, "--limit gpu-sxm-09: no such host in inventories/prod.py"),
    (HOST, [], True, f"host {HOST}: tune_space is not set: nothing to search"),
    (HOST, [space_data(), "vllm_enabled=false"], True, f"host {HOST}: vllm_enabled is False: nothing to tune"),
    (HOST, [space_data({"flags": {"max-num-seqs": [64, 64]}})], True,
     "tune_space.flags.max-num-seqs = [64, 64]: a list of distinct values"),
    (HOST, [space_data()], True, f"host {HOST}: it serves vllm.service (no vllm_layout) and tune_space has layouts: "
     "a deploy moves a host to a layout but not back"),
    (HOST, [space_data(FLAGS)], False, f"host {HOST}: nothing fronts it (no gateway host in inventories/prod.py, no "
     "gateway_drain_hook), so its clients would see each candidate's restart (fix: put it behind the fleet gateway"),
])
def test_a_tune_that_cannot_run_is_refused_before_the_host_is_touched(host, data, out_of_service, message):
    with pytest.raises(tune_host.TuneError) as exc:
        tune_host.prepare(PROD, host, data, out_of_service)
    assert message in str(exc.value)


def test_a_host_behind_a_drain_hook_or_out_of_service_is_tuned_and_says_how():
    th = tune_host.prepare(PROD, HOST, [space_data(FLAGS), 'gateway_drain_hook=["/bin/true", "{host}", "{state}"]'],
                           False)
    assert th.fronted_by.startswith("taken out of your load balancer's rotation by gateway_drain_hook")
    th = tune_host.prepare(PROD, HOST, [space_data(FLAGS)], True)
    assert th.fronted_by.startswith("out of service as you said") and not th.gateways
    # the start is the configured state: V100's max-num-seqs is not in the space, its nearest is
    start = th.start()
    assert dict(start.flags)["max-num-seqs"] in (64, 128) and start.layout is None


def host(**override) -> tune_host.TuneHost:
    model = {"name": "m", "version": "1", "source": "https://models.internal/m-1.tar", "sha256": "a" * 64,
             "torch_dtype": "float16", "num_attention_heads": 32}
    data = {k: v for k, v in schema_defaults().items() if not k.startswith("__")} | {
        "vllm_model": model, "tune_space": SPACE, "gpu_profile": None, "vllm_flags": {"max-num-seqs": 128}} | override
    settings = validate("gpu-1", data)
    return tune_host.TuneHost("inventories/prod.py", "gpu-1", "10.0.0.1", data, settings,
                              tune.Space.parse(SPACE), ["probe_duration_s=5"], "held", True)


def test_a_candidate_is_validated_as_a_deploy_validates_it_and_deployed_with_its_values():
    th = host()
    ok = tune.Candidate((("max-num-seqs", 64),), None)
    assert tune_host.refused(th, ok) == ""
    # a layout the host's GPUs cannot give (a host without a GPU profile): the deploy's own refusal
    bad = tune.Candidate((("max-num-seqs", 64),), "2x4")
    assert "vllm_layout" in tune_host.refused(th, bad)
    data = tune_host.candidate_data(th, ok)
    assert data[0] == "probe_duration_s=5" and 'vllm_flags={"max-num-seqs": 64}' in data
    assert "vllm_layout=null" in data and data[-2:] == ["rollout_strategy=rolling", "gateway_drain_hook=null"]
    assert tune_host.candidate_data(th, None) == ["probe_duration_s=5", "rollout_strategy=rolling",
                                                  "gateway_drain_hook=null"]


def test_a_failed_deploy_gives_the_rolls_reason_with_the_servers_last_words():
    out = ("--> Starting operation: vllm | switched\n    [lab-c4] vllm: not ready: vllm.service exited while\n"
           "starting (failed, 0 restart(s)); ValueError: No available memory for the cache blocks; switched back to "
           "the previous version, which is serving again; stopping the roll\n")
    assert tune_host.deploy_failure(out, "lab-c4") == (
        "not ready: vllm.service exited while starting (failed, 0 restart(s)); ValueError: No available memory for "
        "the cache blocks; switched back to the previous version, which is serving again; stopping the roll")
    assert tune_host.restarted(tune_host.deploy_failure(out, "lab-c4"))
    # refused by the host's vLLM before any change: pyinfra's error line, once, and no start
    refused = ("    [lab-c4]  Error: vllm_flags: vLLM 0.32.0 refuses these flags at start: max_num_batched_tokens (4) "
               "must be greater than or equal to max_num_seqs (8). (fix: ...); the running service is left as it is\n"
               "--> Operation error in /work/main/operations/vllm.py line 464: host lab-c4: vllm_flags: ...\n")
    why = tune_host.deploy_failure(refused, "lab-c4")
    assert why.startswith("vllm_flags: vLLM 0.32.0 refuses these flags at start: max_num_batched_tokens (4)"), why
    assert why.endswith("the running service is left as it is") and not tune_host.restarted(why)


def report(rps, passed=True, preemptions=0.0, kv=0.3, note="", requests=100):
    server = SimpleNamespace(preemptions=preemptions, kv_cache={"mean": kv / 2, "max": kv})
    trial = SimpleNamespace(offered_rps=rps or 1.0, passed=passed, server=server,
                            overall=SimpleNamespace(requests=requests, e2e_ms=SimpleNamespace(p95=420.0)))
    effective = SimpleNamespace(rps=rps, p95_ms_at_effective=[400.0, 410.0] if rps else [], note=note,
                                lowest_failing_rps=rps * 1.25 if rps else 8.0)
    return SimpleNamespace(effective=effective, trials=[trial], reasons=[])


@pytest.mark.parametrize("rep,floor,status,reason", [
    (report(8.0), None, tune.MEASURED, ""),
    (report(None, passed=False, note="did not hold 8/s, the rate it had to hold"), 8.0, tune.BEATEN,
     "did not hold 8/s, the rate it had to hold"),
    (report(None, passed=False, note="no rate down to 0.01/s met the SLO"), None, tune.FAILED,
     "no rate down to 0.01/s met the SLO"),
    (report(8.0, preemptions=30), None, tune.REJECTED, "30 preemptions over 100 requests"),
    (report(8.0, kv=0.99), None, tune.REJECTED, "KV cache peak 99.0%"),
])
def test_a_search_is_judged_measured_beaten_failed_or_rejected(rep, floor, status, reason):
    th = host()
    c = tune.Candidate((("max-num-seqs", 64),), None)
    t = tune_host.judge(th.settings, c, rep, floor, tune.Trial(c.key, c.describe(), tune.REFUSED))
    assert t.status == status and t.reason.startswith(reason), t
    if status == tune.MEASURED:
        assert t.effective_rps == 8.0 and t.p95_ms == 410.0 and t.resolution == 2.0
        # measured again at the same rate, the interval is still the search's bracket wide
        t.repeats = [8.0]
        assert tune.figures(t) == (8.0, 2.0)


def test_confirm_names_a_slow_host_and_one_that_missed_its_slos():
    results = {"a": {"passed": True, "p95_ms": 400.0}, "b": {"passed": True, "p95_ms": 420.0},
               "c": {"passed": True, "p95_ms": 560.0}, "d": {"passed": False, "p95_ms": None, "reasons": ["e2e"]}}
    odd = tune_host.outliers(results, 0.25)
    assert set(odd) == {"c", "d"}
    assert odd["c"] == "P95 end-to-end 560 ms, 33% above the group's median 420 ms (tune_confirm_tolerance 25%)"
    assert odd["d"].startswith("missed the SLOs at the tuned rate: e2e")


def test_confirm_says_how_a_host_differs_from_the_tuned_configuration():
    th = host()
    same = {"vllm_flags": dict(th.settings.vllm_flags), "vllm_env": dict(th.settings.vllm_env)}
    assert tune_host.not_serving(th.settings, same) == ""
    other = same | {"vllm_flags": {"max-num-seqs": 64}, "vllm_layout": None}
    assert tune_host.not_serving(th.settings, other) == "vllm_flags max-num-seqs 128 (tuned: 64)"
    # a layout of instances: the host's (validated, with the schema's defaults) and the report's (as
    # group data wrote it) are the same layout
    two = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0"}, {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}]
    laid = host(vllm_layout=two, vllm_flags={"max-num-seqs": 128}).settings
    assert tune_host.not_serving(laid, same | {"vllm_layout": two}) == ""
    moved = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0-1"}]
    assert tune_host.not_serving(laid, same | {"vllm_layout": moved}).startswith('vllm_layout [{"name": "a"')


def test_the_command_tunes_one_host_and_confirm_needs_a_winner_and_names_a_host_that_does_not_serve_it(tmp_path):
    from click.testing import CliRunner

    from llmfleet.cli import main

    two = CliRunner().invoke(main, ["tune", PROD, "--limit", HOST, "--limit", "gpu-sxm-02.example.internal"])
    assert two.exit_code == 2 and "tune one host at a time (fix: --limit HOST" in two.output, two.output
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"winner": None}))
    res = CliRunner().invoke(main, ["tune", PROD, "--limit", "v100_sxm2", "--confirm", str(empty)])
    assert res.exit_code == 2 and "the tune has no winner" in res.output, res.output
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"winner": {"candidate": "max-num-seqs 64", "effective_rps_mean": 12.0,
                                             "vllm_flags": {"max-num-seqs": 64}}}))
    res = CliRunner().invoke(main, ["tune", PROD, "--limit", "v100_sxm2", "--confirm", str(report)])
    assert res.exit_code == 1, res.output
    flat = " ".join(res.output.split())
    assert f"{HOST}: does not serve the tuned configuration: vllm_flags max-num-seqs" in flat, flat
    assert "confirmed on 0 of 2 host(s) at 12 req/s" in flat, flat
