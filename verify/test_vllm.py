"""vllm: the service runs as rendered and serves: unit active and enabled, the process's
arguments are the rendered ones, /health, /v1/models, /metrics (the names the alerts use),
a completion returns tokens, with an API key /v1 refuses requests without it, and the
environment holds exactly what the deploy recorded when it made it. On a host with a serving
layout, each of these for every instance on its own port, and each instance's process sees its
GPUs only and runs on its CPUs and memory node (verify/test_frontdoor.py checks the front door)."""

import pytest

from llmfleet import compat, monitoring, vllm, vllm_layout, vllm_logs
from verify.helpers import expect, run_remote


@pytest.fixture(scope="module")
def served(host, host_name, settings) -> dict:
    """{unit: {"instance", "active", "enabled", "pid", "probe"}}: vllm.service, or every instance."""
    if not settings.vllm_enabled:
        pytest.skip("vllm_enabled is False for this host")
    instances = vllm_layout.instances(settings)
    out = {}
    for inst in instances if instances is not None else [None]:
        unit = vllm.unit_name(inst)
        shown = host.run("systemctl show -p ActiveState -p UnitFileState -p MainPID %s", unit)
        props = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
        port = inst.port if inst is not None else settings.vllm_port
        out[unit] = {"instance": inst, "active": props.get("ActiveState"), "enabled": props.get("UnitFileState"),
                     "pid": props.get("MainPID"),
                     "probe": run_remote(host, "vllm_probe", str(port), settings.vllm_served_model_name,
                                         vllm.API_KEY_FILE if settings.vllm_api_key_file else "-")}
    return out


@pytest.mark.weights_load
def test_weights_load_time(host, host_name, settings, served, record_property):
    """This start of each server loaded its weights within vllm_weights_load_max_s, as its own log says
    ("Loading weights took N seconds"; llmfleet/vllm_logs.py), read from the journal of the unit's
    current invocation. Every start still in the journal goes into the report (the audit keeps the
    figure, so a degrading disk shows as a trend)."""
    loads = run_remote(host, "vllm_loads", *served)
    figures, wrong = {}, []
    for unit, state in loads.items():
        now, every = vllm_logs.current(state)
        earlier = ", ".join(f"{s.weights_s:g}" for s in every[-6:] if s is not now and s.weights_s is not None)
        if now is None or now.weights_s is None:
            wrong.append(f"{host_name}: {unit}: weights load time of this start (vLLM's \"Loading weights took N "
                         f"seconds\"): expected a line in the journal, actual none for invocation "
                         f"{state.get('current') or 'none'} ({len(every)} earlier start(s) with one"
                         f"{'; ' + state['error'] if state.get('error') else ''})")
            continue
        figures[unit] = {"weights_s": now.weights_s, "model_s": now.model_s, "at": now.at, "workers": now.workers,
                         "starts": [s.as_dict() for s in every[-20:]]}
        if now.weights_s > settings.vllm_weights_load_max_s:
            wrong.append(f"{host_name}: {unit}: weights load time (vllm_weights_load_max_s): expected at most "
                         f"{settings.vllm_weights_load_max_s:g} s, actual {now.weights_s:g} s (started {now.at}; "
                         f"{'earlier starts: ' + earlier + ' s' if earlier else 'no earlier start in the journal'})")
    record_property("vllm_weights_load", figures)
    assert not wrong, "\n".join(wrong)


def test_unit_active_and_enabled(host_name, served):
    for unit, s in served.items():
        expect(host_name, unit, {"ActiveState": "active", "UnitFileState": "enabled"},
               {"ActiveState": s["active"], "UnitFileState": s["enabled"]})


def test_process_arguments_are_the_rendered_flags(host, host_name, settings, served):
    for unit, s in served.items():
        cmdline = host.run("cat /proc/%s/cmdline", s["pid"] or "0").stdout
        expect(host_name, f"{unit}: vLLM process arguments (vllm_flags, vllm_model, vllm_layout, ...)",
               vllm.command(settings, s["instance"]), [a for a in cmdline.split("\0") if a])


def test_health_models_and_a_completion(host_name, settings, served):
    for unit, s in served.items():
        probe = s["probe"]
        expect(host_name, f"{unit}: /health", 200, probe["health"])
        expect(host_name, f"{unit}: /v1/models", [settings.vllm_served_model_name], probe["models"])
        expect(host_name, f"{unit}: /v1/completions with max_tokens 4, ignore_eos: completion tokens", 4,
               probe["completion_tokens"])


def test_metrics_the_alerts_use_are_exported(host_name, settings, served):
    want = sorted(monitoring.metric_names(settings.vllm_version))
    assert compat.metric("kv_cache", settings.vllm_version) in want
    for unit, s in served.items():
        exported = set(s["probe"]["metrics"]) if isinstance(s["probe"]["metrics"], list) else set()
        missing = [m for m in want if not ({m, m + "_bucket", m + "_total", m + "_count"} & exported)]
        expect(host_name, f"{unit}: metrics of vLLM {settings.vllm_version} the alert rules use, missing from "
                          "/metrics", [], missing)
        # names passed around as vLLM metrics that no version defines (vllm/engine/metrics.py in V0,
        # vllm/v1/metrics/loggers.py in V1, every release 0.4.3 to 0.33.0)
        invented = {"vllm:engine_gpu_cache_usage_ratio", "vllm:engine_num_requests_waiting",
                    "vllm:engine_request_wait_time_seconds"}
        expect(host_name, f"{unit}: invented metric names exported", [], sorted(invented & exported))


def test_api_key_guards_v1(host_name, settings, served):
    if not settings.vllm_api_key_file:
        pytest.skip("vllm_api_key_file is None: the API is open by configuration")
    for unit, s in served.items():
        expect(host_name, f"{unit}: /v1 without the API key (models, completion)", {"models": 401, "completion": 401},
               s["probe"]["without_key"])


def test_each_instance_sees_its_gpus_and_runs_on_its_numa_node(host, host_name, settings, served):
    """From /proc: CUDA_VISIBLE_DEVICES in the process's environment, its CPU affinity
    (Cpus_allowed_list) and its memory policy (numa_maps: bind:<nodes>), against the binding
    worked out from the host's own NUMA nodes."""
    if vllm_layout.instances(settings) is None:
        pytest.skip("no vllm_layout: vllm.service runs on every GPU and CPU of the host")
    listing = host.run("for d in /sys/devices/system/node/node[0-9]*; do echo \"${d##*/node} $(cat $d/cpulist)\"; "
                       "done").stdout
    node_cpus = {int(n): c for n, _, c in (line.partition(" ") for line in listing.splitlines()) if n.isdigit()}
    for unit, s in served.items():
        inst, pid = s["instance"], s["pid"] or "0"
        environ = host.run("cat /proc/%s/environ", pid).stdout.split("\0")
        seen = [e.split("=", 1)[1] for e in environ if e.startswith("CUDA_VISIBLE_DEVICES=")]
        expect(host_name, f"{unit}: CUDA_VISIBLE_DEVICES of its process",
               [",".join(map(str, inst.gpus))] if inst.gpus else [], seen)
        bound = vllm_layout.binding(inst, settings.profile, node_cpus)
        status = dict(line.split(":\t", 1) for line in host.run("cat /proc/%s/status", pid).stdout.splitlines()
                      if ":\t" in line)
        policy = host.run("grep -m1 -o ' bind:[0-9,-]*' /proc/%s/numa_maps", pid).stdout.strip()
        expect(host_name, f"{unit}: CPUs and memory policy of its process",
               (bound.cpus, f"bind:{bound.nodes}") if bound else (status.get("Cpus_allowed_list"), ""),
               (vllm_layout.format_cpulist(vllm_layout.parse_cpulist(status.get("Cpus_allowed_list", ""))), policy))


ENV_RECORD = ".llmfleet-packages.json"  # written into each environment by the deploy (operations/vllm.py)


def test_environment_holds_what_was_recorded_when_it_was_made(host, host_name, settings):
    if not settings.vllm_enabled:
        pytest.skip("vllm_enabled is False for this host")
    env = vllm.env_dir(settings)
    record_file = f"{env}/{ENV_RECORD}"
    if host.run("test -x %s/bin/python3", env).rc != 0:
        pytest.fail(f"{host_name}: vllm_packages: expected the environment {env}, actual: none (deploy it)")
    seen = run_remote(host, "vllm_env", record_file, python=f"{env}/bin/python3")
    record, actual = seen["record"], seen["actual"]
    assert record is not None, (f"{host_name}: {record_file}: expected the record of the environment's packages, "
                                "actual: none (an environment made before records: a deploy records it)")
    expect(host_name, f"{record_file}: owner uid and mode", (0, "0o644"), (seen["owner"], seen["mode"]))
    wrong = ([f"{name}: expected {version}, actual not installed" for name, version in sorted(record.items())
              if name not in actual]
             + [f"{name}: expected {version}, actual {actual[name]}" for name, version in sorted(record.items())
                if name in actual and actual[name] != version]
             + [f"{name}: expected not installed, actual {version}" for name, version in sorted(actual.items())
                if name not in record])
    assert not wrong, (f"{host_name}: vLLM environment {env} differs from its record {record_file} (a deploy puts "
                       "the recorded versions back): " + "; ".join(wrong))
