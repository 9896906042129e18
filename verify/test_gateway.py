"""gateway: on a gateway host (a host of gateway_group) the fleet gateway's HAProxy runs as rendered
(active and enabled, its configuration the rendering over the inventory's serving hosts, each of
them UP in its stats) and exports its own metrics; on a serving host the gateway agent listens and
answers "ready 100%" (a host a roll left drained answers "drain"). A host checking itself has no
inventory to render the gateway's server list from: its manifest check compares the file with what
the deploy wrote (verify/test_managed_files.py), and the servers its running HAProxy balances over
must each be UP."""

import hashlib

import pytest

from llmfleet import gateway
from llmfleet.settings import validate
from verify.helpers import expect, read_files, run_remote


@pytest.fixture(scope="module")
def is_gateway(settings, host_groups) -> bool:
    return settings.gateway_group in host_groups


@pytest.fixture(scope="module")
def gate(host, settings, is_gateway) -> dict:
    if not is_gateway:
        pytest.skip(f"not a gateway host (gateway_group {settings.gateway_group!r}): no fleet gateway here")
    shown = host.run("systemctl show -p ActiveState -p UnitFileState %s", gateway.SERVICE)
    return {"props": dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line),
            "config": read_files(host, gateway.CONFIG_PATH)[gateway.CONFIG_PATH],
            "stats": run_remote(host, "frontdoor_admin", "state", gateway.ADMIN_SOCKET, gateway.BACKEND),
            "metrics": run_remote(host, "vllm_probe", str(settings.gateway_metrics_port),
                                  settings.vllm_served_model_name, "-")}


@pytest.fixture(scope="module")
def fleet(inventory_data, self_audit_host, settings) -> list[gateway.Server] | None:
    """The serving hosts the gateway balances over, from the inventory (None: a host checking itself)."""
    if self_audit_host is not None:
        return None
    hosts = [(name, h["data"].get("ssh_hostname") or name, validate(name, h["data"]), list(h.get("groups") or []))
             for name, h in inventory_data.items()]
    return gateway.serving_hosts(hosts, settings.gateway_group)


def test_gateway_active_and_enabled(host_name, gate):
    expect(host_name, gateway.SERVICE, {"ActiveState": "active", "UnitFileState": "enabled"},
           {k: gate["props"].get(k) for k in ("ActiveState", "UnitFileState")})


def test_gateway_configuration_is_the_rendering_over_the_inventorys_serving_hosts(host_name, settings, gate, fleet):
    def sha(text):
        return hashlib.sha256(text.encode()).hexdigest() if text is not None else None

    if fleet is None:  # a host checking itself: the manifest check compares the file (module docstring)
        expect(host_name, f"{gateway.CONFIG_PATH}", "present", "present" if gate["config"] else "missing")
        return
    expect(host_name, f"{gateway.CONFIG_PATH} sha256 (gateway_*, the inventory's serving hosts: "
                      f"{', '.join(s.name for s in fleet)})", sha(gateway.render_config(settings, fleet)),
           sha(gate["config"]))


def test_every_serving_host_is_up_in_the_gateway(host_name, gate, fleet):
    stats = gate["stats"]
    expect(host_name, "gateway runtime API", "", stats["why"])
    servers = stats.get("servers", {})
    names = [s.name for s in fleet] if fleet is not None else sorted(servers)
    expect(host_name, f"backend {gateway.BACKEND}: server status", {name: "UP" for name in names},
           {name: s["status"] for name, s in servers.items()})


def test_gateway_exports_its_own_metrics(host_name, settings, gate):
    names = gate["metrics"]["metrics"] if isinstance(gate["metrics"].get("metrics"), list) else []
    expect(host_name, f"HAProxy's metrics on gateway_metrics_port {settings.gateway_metrics_port} (server status, "
                      "frontend requests)", ["haproxy_frontend_http_requests_total", "haproxy_server_status"],
           sorted({"haproxy_frontend_http_requests_total", "haproxy_server_status"} & set(names)))


def test_the_gateway_agent_answers_ready_on_a_serving_host(host, host_name, settings, is_gateway):
    if is_gateway or not settings.vllm_enabled:
        pytest.skip("not a serving host: no gateway agent here")
    shown = host.run(f"systemctl show -p ActiveState -p UnitFileState {gateway.AGENT_SOCKET}; "
                     f"timeout 5 bash -c 'cat < /dev/tcp/127.0.0.1/{int(settings.gateway_agent_port)}'")
    lines = shown.stdout.splitlines()
    props = dict(line.split("=", 1) for line in lines if "=" in line and line.split("=", 1)[0].isalpha())
    answer = next((line for line in lines if "=" not in line), None)
    expect(host_name, gateway.AGENT_SOCKET, {"ActiveState": "active", "UnitFileState": "enabled"},
           {k: props.get(k) for k in ("ActiveState", "UnitFileState")})
    expect(host_name, f"gateway agent on gateway_agent_port {settings.gateway_agent_port}: its answer", gateway.READY,
           answer)
