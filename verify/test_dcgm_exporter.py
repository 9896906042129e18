"""dcgm_exporter: on a GPU host, DCGM and dcgm-exporter installed at group data's versions and held,
both services active and enabled, the exporter's unit and counters file as rendered, and every GPU
of the profile reporting through it; DCGM's own diagnostics pass on every GPU (the quick level in
every verify, the long one in onboarding's acceptance). (A host without GPUs reports skips:
gpu_profile is None.)"""

import json

import pytest

from llmfleet import addresses, dcgm_exporter
from verify.helpers import expect, run_remote


def test_dcgm_exporter_reports_every_gpu(host, host_name, settings, gpu_profile):
    packages = dcgm_exporter.dcgm_packages(settings)
    url = addresses.local_url(settings.dcgm_exporter_address, settings.host_service_ports["dcgm_exporter"])
    state = run_remote(host, "telemetry_state", json.dumps({
        "units": [dcgm_exporter.DCGM_SERVICE, dcgm_exporter.EXPORTER_SERVICE],
        "files": [dcgm_exporter.EXPORTER_UNIT_PATH, dcgm_exporter.EXPORTER_COUNTERS],
        "scrape": url, "prefixes": ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"],
        "check": [["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *sorted(packages)],
                  ["apt-mark", "showhold"]]}))
    installed = dict(line.split(" ", 1) for line in state["checks"][0]["output"].splitlines() if " " in line)
    expect(host_name, "DCGM packages (dcgm_version, dcgm_exporter_package)", packages,
           {p: installed.get(p) for p in packages})
    held = set(state["checks"][1]["output"].split())
    expect(host_name, "DCGM packages held (apt-mark hold)", sorted(packages), sorted(p for p in packages if p in held))
    running = {"active": "active", "enabled": "enabled"}
    expect(host_name, "DCGM services", {dcgm_exporter.DCGM_SERVICE: running, dcgm_exporter.EXPORTER_SERVICE: running},
           state["units"])
    files = {p: (f or {}).get("content") for p, f in state["files"].items()}
    expect(host_name, f"{dcgm_exporter.EXPORTER_UNIT_PATH} (dcgm_exporter_*)", dcgm_exporter.exporter_unit(settings),
           files[dcgm_exporter.EXPORTER_UNIT_PATH])
    expect(host_name, f"{dcgm_exporter.EXPORTER_COUNTERS} (dcgm_exporter_counters)",
           dcgm_exporter.counters_csv(settings), files[dcgm_exporter.EXPORTER_COUNTERS])
    assert state["scrape"]["error"] is None, (
        f"{host_name}: dcgm-exporter: expected to answer at {url}, actual {state['scrape']['error']}")
    gpus = {name: sorted({labels.split('gpu="', 1)[1].split('"', 1)[0] for n, labels, _ in state["scrape"]["samples"]
                          if n == name and 'gpu="' in labels})
            for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")}
    want = [str(i) for i in range(gpu_profile.count)]
    expect(host_name, f"GPUs reporting through dcgm-exporter (gpu_profile {settings.gpu_profile})",
           {name: want for name in gpus}, gpus)


def _diag(host, host_name, settings, gpu_profile, level: int, record_property) -> None:
    """`dcgmi diag -r LEVEL -j` on the host (llmfleet/remote/dcgm_exporter_diag.py), read by
    llmfleet/dcgm_exporter.py: every test on every GPU Pass (Skip, Fail and a test that did not run fail, with
    DCGM's own words)."""
    ran = run_remote(host, "dcgm_exporter_diag", str(level), str(settings.dcgm_diag_timeout_s))
    if "error" in ran:
        pytest.fail(f"{host_name}: dcgmi diag -r {level} (dcgm_diag_*_level): expected to run, actual: {ran['error']}")
    try:
        diag = dcgm_exporter.parse(ran["json"])
    except dcgm_exporter.DiagError as exc:
        pytest.fail(f"{host_name}: dcgmi diag -r {level}: expected its JSON, actual: {exc}")
    record_property(f"dcgm_diag_r{level}", {"seconds": ran.get("seconds"), "rc": ran.get("rc"),
                                            "per_gpu": {str(g): t for g, t in diag.per_gpu().items()}})
    print(f"{host_name}: dcgmi diag -r {level} in {ran.get('seconds')} s: {dcgm_exporter.describe(diag)}")
    problems = dcgm_exporter.problems(diag, level, list(range(gpu_profile.count)))
    if not problems and ran.get("rc"):
        problems = [f"dcgmi diag -r {level}: exit status: expected 0, actual {ran['rc']} (every result read Pass)"]
    assert not problems, "\n".join(f"{host_name} {p}" if p.startswith("GPU") else f"{host_name}: {p}"
                                   for p in problems)


def test_dcgm_diagnostics_quick(host, host_name, settings, gpu_profile, record_property):
    """DCGM's quick diagnostic (dcgm_diag_verify_level, 1: seconds) on every GPU host, every run of verify."""
    _diag(host, host_name, settings, gpu_profile, settings.dcgm_diag_verify_level, record_property)


@pytest.mark.acceptance
@pytest.mark.onboarding
def test_dcgm_diagnostics_long(host, host_name, settings, gpu_profile, record_property):
    """DCGM's long diagnostic (dcgm_diag_acceptance_level, 3: about 15 minutes of stress, memory, PCIe,
    power) in onboarding's acceptance; audits skip it."""
    _diag(host, host_name, settings, gpu_profile, settings.dcgm_diag_acceptance_level, record_property)
