"""frontdoor: on a host with a serving layout, HAProxy runs as rendered in front of the instances:
active and enabled, its configuration the rendered one, every instance UP in its stats, a
completion through it (the host's one endpoint) and through each instance's own route
(/instances/<name>/), 401 there without the key, and its own Prometheus metrics on
frontdoor_metrics_port."""

import hashlib

import pytest

from llmfleet import frontdoor, vllm, vllm_layout
from verify.helpers import expect, read_files, run_remote


@pytest.fixture(scope="module")
def door(host, settings) -> dict:
    if not settings.vllm_enabled or vllm_layout.instances(settings) is None:
        pytest.skip("no vllm_layout on this host: no front door, clients reach vllm.service itself")
    shown = host.run("systemctl show -p ActiveState -p UnitFileState %s", frontdoor.SERVICE)
    props = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    key = vllm.API_KEY_FILE if settings.vllm_api_key_file else "-"
    return {"props": props, "config": read_files(host, frontdoor.CONFIG_PATH)[frontdoor.CONFIG_PATH],
            "stats": run_remote(host, "frontdoor_admin", "state", frontdoor.ADMIN_SOCKET, frontdoor.BACKEND),
            "probe": run_remote(host, "vllm_probe", str(settings.vllm_port), settings.vllm_served_model_name, key),
            "metrics": run_remote(host, "vllm_probe", str(settings.frontdoor_metrics_port),
                                  settings.vllm_served_model_name, "-"),
            "routes": {i.name: run_remote(host, "vllm_probe", str(settings.vllm_port), settings.vllm_served_model_name,
                                          key, frontdoor.instance_path(i.name))
                       for i in vllm_layout.instances(settings)}}  # type: ignore[union-attr]  # not None: skipped above


def test_frontdoor_active_and_enabled(host_name, door):
    expect(host_name, frontdoor.SERVICE, {"ActiveState": "active", "UnitFileState": "enabled"},
           {k: door["props"].get(k) for k in ("ActiveState", "UnitFileState")})


def test_frontdoor_configuration_is_the_rendered_one(host_name, settings, door):
    def sha(text):
        return hashlib.sha256(text.encode()).hexdigest() if text is not None else None

    expect(host_name, f"{frontdoor.CONFIG_PATH} sha256 (vllm_layout, frontdoor_*)",
           sha(frontdoor.render_config(settings, vllm_layout.instances(settings))), sha(door["config"]))


def test_every_instance_is_up_in_the_frontdoor(host_name, settings, door):
    stats = door["stats"]
    expect(host_name, "front door runtime API", "", stats["why"])
    expect(host_name, f"backend {frontdoor.BACKEND}: server status",
           {i.name: "UP" for i in vllm_layout.instances(settings)},
           {name: s["status"] for name, s in stats["servers"].items()})


def test_a_completion_through_the_frontdoor_and_401_without_the_key(host_name, settings, door):
    probe = door["probe"]
    expect(host_name, f"front door on vllm_port {settings.vllm_port}: /v1/completions tokens", 4,
           probe["completion_tokens"])
    expect(host_name, f"front door on vllm_port {settings.vllm_port}: /v1/models", [settings.vllm_served_model_name],
           probe["models"])
    if settings.vllm_api_key_file:
        expect(host_name, "front door: /v1 without the API key (models, completion)",
               {"models": 401, "completion": 401}, probe["without_key"])


def test_each_instance_answers_on_its_own_route_through_the_frontdoor(host_name, settings, door):
    """What the probe per instance measures (llmfleet probe --instances): a completion there, and
    401 without the key (the instance checks it on this route too)."""
    routes = door["routes"]
    expect(host_name, f"front door {frontdoor.instance_path('<name>')}/v1/completions tokens",
           {name: 4 for name in routes}, {name: r["completion_tokens"] for name, r in routes.items()})
    if settings.vllm_api_key_file:
        expect(host_name, f"front door {frontdoor.instance_path('<name>')}/v1 without the API key",
               {name: {"models": 401, "completion": 401} for name in routes},
               {name: r["without_key"] for name, r in routes.items()})


def test_frontdoor_exports_its_own_metrics(host_name, settings, door):
    names = door["metrics"]["metrics"] if isinstance(door["metrics"]["metrics"], list) else []
    expect(host_name, f"HAProxy's metrics on frontdoor_metrics_port {settings.frontdoor_metrics_port} "
                      "(server status, frontend requests)", ["haproxy_frontend_http_requests_total",
                                                               "haproxy_server_status"],
           sorted({"haproxy_frontend_http_requests_total", "haproxy_server_status"} & set(names)))
