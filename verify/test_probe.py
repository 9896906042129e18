"""probe: the host carries probe_check_rps of the probe_mix within the SLOs (probe_slo and each class's
slo: TTFT, TPOT and end-to-end latency at their percentiles) with at least probe_goodput_min of the
requests meeting every SLO of theirs, errors and timeouts counted against them, and, with a stored
baseline (probe_baseline_file), is no worse than it by more than probe_baseline_tolerance.

One short open-loop trial per host from this machine (what a client sees); its report is kept in
reports/probe/<host>.json and .png. On a host with a serving layout, each instance also gets a
trial of its own through the front door's /instances/<name>/ route at its share of the check rate
(reports/probe/<host>.<instance>.json). `llmfleet probe --inventory ... --search` finds the
effective throughput."""

from pathlib import Path

import pytest

from llmfleet.probe import fleet, report
from llmfleet.probe.config import ProbeError
from llmfleet.probe.run import run_probe

pytestmark = pytest.mark.acceptance  # performance, not state: onboarding runs it, audits skip it
REPORTS = Path(__file__).resolve().parents[1] / "reports" / "probe"


def _probe(t: fleet.Target):
    try:
        rep = run_probe(t.url, t.model, t.api_key, t.config, tokenizer=t.tokenizer, host=t.host,
                        gpu_profile=t.gpu_profile, tensor_parallel=t.tensor_parallel, model_dir=t.model_dir,
                        model_dtype=t.model_dtype, baseline_file=t.baseline_file, log=lambda m: None)
    except ProbeError as exc:
        pytest.fail(f"{t.host}: the probe could not run: {exc}")
    REPORTS.mkdir(parents=True, exist_ok=True)
    name = str(t.host).replace("/", ".")
    (REPORTS / f"{name}.json").write_text(rep.model_dump_json(indent=2) + "\n")
    report.plot(rep, REPORTS / f"{name}.png")
    return rep


def _target(host_name, host_data, settings) -> fleet.Target:
    if not settings.vllm_enabled:
        pytest.skip("vllm_enabled is False for this host: nothing serves here")
    return fleet.target_of(host_name, settings, host_data.get("ssh_hostname") or host_name)


@pytest.fixture(scope="module")
def probed(host_name, host_data, settings):
    t = _target(host_name, host_data, settings)
    return t, _probe(t)


def _verdict(where: str, t: fleet.Target, trial) -> str:
    o = trial.overall
    missed = [f"{v.group} P{v.percentile:g} {v.metric.upper()} "
              f"{'failed requests' if v.value_ms is None else f'{v.value_ms:.0f} ms'} > {v.limit_ms:g} ms"
              for v in trial.verdicts if not v.met]
    return (f"{where}: at {trial.offered_rps:g} req/s expected every SLO met (probe_slo {t.config.slo}, and each "
            f"class's) and goodput >= {t.config.goodput_min} (probe_goodput_min); actual: "
            f"{'; '.join(missed) or 'every SLO met'}, goodput {o.goodput_share}, {o.failed} of {o.requests} failed "
            f"{o.errors or ''}: {'; '.join(trial.reasons)}")


def test_sla_holds_at_the_check_rate(host_name, probed):
    t, rep = probed
    trial = rep.trials[-1]
    assert trial.passed, f"{_verdict(host_name, t, trial)} (probe_check_rps; report: reports/probe/{host_name}.json)"


def test_each_instance_carries_its_share_of_the_check_rate(host_name, host_data, settings):
    """A layout's instances, each on its own: one that cannot carry its share is found even while
    the front door hides it behind the others."""
    instances = fleet.instance_targets(_target(host_name, host_data, settings), settings)
    if not instances:
        pytest.skip("no vllm_layout: the host's one vllm.service is probed as the host")
    failed = []
    for t in instances:
        trial = _probe(t).trials[-1]
        if not trial.passed:
            failed.append(f"{_verdict(str(t.host), t, trial)} (report: reports/probe/{str(t.host).replace('/', '.')}"
                          ".json)")
    assert not failed, "; ".join(failed)


def test_the_client_kept_the_schedule(host_name, settings, probed):
    """A measurement is only valid if the client sent on time (a client that cannot keep up delivers
    less than the target rate: vllm-project/vllm#21104, 183.5 QPS at a 200 target)."""
    _, rep = probed
    o = rep.trials[-1].overall
    lag, limit = o.lag_ms["p99"], settings.probe_max_client_lag_ms
    assert lag is not None and lag <= limit, (
        f"{host_name}: expected the probe client's P99 scheduling lag <= {limit:g} ms (probe_max_client_lag_ms), "
        f"actual {lag} ms: the machine running the probe is too busy for the measurement to count")


def test_no_worse_than_the_baseline(host_name, settings, probed):
    _, rep = probed
    if not settings.probe_baseline_file:
        pytest.skip("probe_baseline_file is None: no baseline stored for this host's group")
    g = rep.gate
    assert g.passed, f"{host_name}: {g.metric} expected within {g.tolerance:.0%} of the baseline " \
                     f"({g.baseline_file}): {g.message}"
