"""vllm: the service runs as rendered and serves: unit active and enabled, the process's
arguments are the rendered ones, /health, /v1/models, /metrics (the names the alerts use),
a completion returns tokens, with an API key /v1 refuses requests without it, and the
environment holds exactly what the deploy recorded when it made it."""

import pytest

from llmfleet import compat, monitoring, vllm_service
from verify.helpers import expect, run_remote


@pytest.fixture(scope="module")
def served(host, host_name, settings):
    if not settings.vllm_enabled:
        pytest.skip("vllm_enabled is False for this host")
    unit = host.run("systemctl show -p ActiveState -p UnitFileState -p MainPID %s", vllm_service.UNIT_NAME)
    props = dict(line.split("=", 1) for line in unit.stdout.splitlines() if "=" in line)
    state = {"active": props.get("ActiveState"), "enabled": props.get("UnitFileState"), "pid": props.get("MainPID")}
    probe = run_remote(host, "vllm_probe", str(settings.vllm_port), settings.vllm_served_model_name,
                       vllm_service.API_KEY_FILE if settings.vllm_api_key_file else "-")
    return state, probe


def test_unit_active_and_enabled(host_name, served):
    state, _ = served
    expect(host_name, vllm_service.UNIT_NAME, {"ActiveState": "active", "UnitFileState": "enabled"},
           {"ActiveState": state.get("active"), "UnitFileState": state.get("enabled")})


def test_process_arguments_are_the_rendered_flags(host, host_name, settings, served):
    state, _ = served
    cmdline = host.run("cat /proc/%s/cmdline", state.get("pid", "0")).stdout
    expect(host_name, "vLLM process arguments (vllm_flags, vllm_model, ...)", vllm_service.command(settings),
           [a for a in cmdline.split("\0") if a])


def test_health_models_and_a_completion(host_name, settings, served):
    _, probe = served
    expect(host_name, "/health", 200, probe["health"])
    expect(host_name, "/v1/models", [settings.vllm_served_model_name], probe["models"])
    expect(host_name, "/v1/completions with max_tokens 4, ignore_eos: completion tokens", 4,
           probe["completion_tokens"])


def test_metrics_the_alerts_use_are_exported(host_name, settings, served):
    _, probe = served
    exported = set(probe["metrics"]) if isinstance(probe["metrics"], list) else set()
    want = sorted(monitoring.metric_names(settings.vllm_version))
    missing = [m for m in want if not ({m, m + "_bucket", m + "_total", m + "_count"} & exported)]
    expect(host_name, f"metrics of vLLM {settings.vllm_version} the alert rules use, missing from /metrics", [],
           missing)
    # the design notes' names exist in no version (../shared/facts/v100-vllm.md)
    invented = {"vllm:engine_gpu_cache_usage_ratio", "vllm:engine_num_requests_waiting",
                "vllm:engine_request_wait_time_seconds"}
    expect(host_name, "invented metric names exported", [], sorted(invented & exported))
    assert compat.metric("kv_cache", settings.vllm_version) in want


def test_api_key_guards_v1(host_name, settings, served):
    _, probe = served
    if not settings.vllm_api_key_file:
        pytest.skip("vllm_api_key_file is None: the API is open by configuration")
    expect(host_name, "/v1 without the API key (models, completion)", {"models": 401, "completion": 401},
           probe["without_key"])


ENV_RECORD = ".llmfleet-packages.json"  # written into each environment by the deploy (operations/vllm.py)


def test_environment_holds_what_was_recorded_when_it_was_made(host, host_name, settings):
    if not settings.vllm_enabled:
        pytest.skip("vllm_enabled is False for this host")
    env = vllm_service.env_dir(settings)
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
