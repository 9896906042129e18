"""dcgm_exporter: on a GPU host, DCGM and dcgm-exporter installed at group data's versions and held,
both services active and enabled, the exporter's unit and counters file as rendered, and every GPU
of the profile reporting through it. (A host without GPUs reports skips: gpu_profile is None.)"""

import json

from llmfleet import telemetry
from verify.helpers import expect, run_remote


def test_dcgm_exporter_reports_every_gpu(host, host_name, settings, gpu_profile):
    packages = telemetry.dcgm_packages(settings)
    url = telemetry.local_url(settings.dcgm_exporter_address, settings.host_service_ports["dcgm_exporter"])
    state = run_remote(host, "telemetry_state", json.dumps({
        "units": [telemetry.DCGM_SERVICE, telemetry.EXPORTER_SERVICE],
        "files": [telemetry.EXPORTER_UNIT_PATH, telemetry.EXPORTER_COUNTERS],
        "scrape": url, "prefixes": ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"],
        "check": [["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *sorted(packages)],
                  ["apt-mark", "showhold"]]}))
    installed = dict(line.split(" ", 1) for line in state["checks"][0]["output"].splitlines() if " " in line)
    expect(host_name, "DCGM packages (dcgm_version, dcgm_exporter_package)", packages,
           {p: installed.get(p) for p in packages})
    held = set(state["checks"][1]["output"].split())
    expect(host_name, "DCGM packages held (apt-mark hold)", sorted(packages), sorted(p for p in packages if p in held))
    running = {"active": "active", "enabled": "enabled"}
    expect(host_name, "DCGM services", {telemetry.DCGM_SERVICE: running, telemetry.EXPORTER_SERVICE: running},
           state["units"])
    files = {p: (f or {}).get("content") for p, f in state["files"].items()}
    expect(host_name, f"{telemetry.EXPORTER_UNIT_PATH} (dcgm_exporter_*)", telemetry.exporter_unit(settings),
           files[telemetry.EXPORTER_UNIT_PATH])
    expect(host_name, f"{telemetry.EXPORTER_COUNTERS} (dcgm_exporter_counters)", telemetry.counters_csv(settings),
           files[telemetry.EXPORTER_COUNTERS])
    assert state["scrape"]["error"] is None, (
        f"{host_name}: dcgm-exporter: expected to answer at {url}, actual {state['scrape']['error']}")
    gpus = {name: sorted({labels.split('gpu="', 1)[1].split('"', 1)[0] for n, labels, _ in state["scrape"]["samples"]
                          if n == name and 'gpu="' in labels})
            for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS")}
    want = [str(i) for i in range(gpu_profile.count)]
    expect(host_name, f"GPUs reporting through dcgm-exporter (gpu_profile {settings.gpu_profile})",
           {name: want for name in gpus}, gpus)
