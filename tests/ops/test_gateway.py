"""The gateway component's operations, the inventory in and operations out: on a gateway host,
HAProxy installed, its configuration rendered over the inventory's serving hosts (those a --limit
leaves out too, never a gateway host or one that does not serve) and reloaded when it changes; on a
serving host the agent's state file and units, the socket restarted when a unit changes; a gateway
host that serves is refused before any operation; a host that is neither gets a no-op with why."""

from __future__ import annotations

import pytest

from llmfleet import gateway
from llmfleet.schema import defaults as schema_defaults
from operations import gateway as ops

MODEL = {"name": "tiny", "version": "2", "source": "https://models.internal/t.tar", "sha256": "a" * 64,
         "torch_dtype": "bfloat16", "num_attention_heads": 32}


class Data(dict):
    def dict(self):
        return dict(self)


class InventoryHost:
    """What the operation reads of an inventory host: name, data, groups."""

    def __init__(self, name: str, groups: list[str], **data):
        base = {k: v for k, v in schema_defaults().items() if not k.startswith("__")} | {"vllm_model": MODEL}
        self.name, self.groups, self.data = name, groups, Data(base | data)


class Will:
    def __init__(self, will_change: bool):
        self.will_change = will_change


INVENTORY = [InventoryHost("gpu-1", ["v100"], ssh_hostname="10.0.0.11"),
             InventoryHost("gpu-2", ["v100"], ssh_hostname="10.0.0.12", vllm_port=8100),
             InventoryHost("gw-1", ["gateways"], ssh_hostname="10.0.0.2", vllm_enabled=False),
             InventoryHost("build-1", ["tools"], vllm_enabled=False)]


def planned(monkeypatch, name: str, changed: bool = True):
    """The operations the component declares on inventory host `name`: [(operation, arguments)], and
    the host's no-op lines."""
    from pyinfra.context import ctx_host

    from llmfleet.settings import validate

    me = next(h for h in INVENTORY if h.name == name)
    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(ops, "inventory", INVENTORY)
    monkeypatch.setattr(ops, "apt_installed", lambda name, packages, cache, **kw: calls.append(("apt", {
        "name": name, "packages": packages})) or Will(False))
    for what in ("put", "directory"):
        monkeypatch.setattr(ops.managed_files, what, lambda name, path, content=None, _w=what, **kw: calls.append((
            _w, {"name": name, "path": path, "content": content})) or Will(changed))
    monkeypatch.setattr(ops.systemd, "service", lambda **kw: calls.append(("service", kw)))
    noops: list[str] = []

    class Host:
        groups = me.groups
        name = me.name

        def noop(self, text):
            noops.append(text)

    with ctx_host.use(Host()):
        ops.configure.__wrapped__(validate(name, me.data.dict()))
    return calls, noops


def test_a_gateway_host_balances_over_every_serving_host_of_the_inventory_and_reloads_on_a_change(monkeypatch):
    calls, _ = planned(monkeypatch, "gw-1")
    assert [c for c, _ in calls] == ["apt", "put", "service"]
    assert calls[0][1]["packages"] == ["haproxy"]
    put = calls[1][1]
    assert put["path"] == gateway.CONFIG_PATH and put["name"] == "gateway: haproxy.cfg balances over the fleet's 2 " \
                                                                  "serving host(s)"
    assert "server gpu-1 10.0.0.11:8000 check" in put["content"] and "server gpu-2 10.0.0.12:8100 check" in \
        put["content"]
    assert "gw-1" not in put["content"].split("backend fleet", 1)[1] and "build-1" not in put["content"]
    assert calls[2][1] == {"name": "gateway: haproxy is enabled and running", "service": "haproxy.service",
                          "running": True, "enabled": True, "reloaded": True}
    calls, _ = planned(monkeypatch, "gw-1", changed=False)
    assert calls[2][1]["reloaded"] is False


def test_a_serving_host_gets_the_agent_answering_ready(monkeypatch):
    calls, _ = planned(monkeypatch, "gpu-1")
    assert [(c, a["path"]) for c, a in calls if c != "service"] == [
        ("directory", gateway.AGENT_DIR), ("put", gateway.AGENT_STATE),
        ("put", "/etc/systemd/system/llmfleet-gateway-agent.socket"),
        ("put", "/etc/systemd/system/llmfleet-gateway-agent@.service")]
    assert calls[1][1]["content"] == "ready 100%\n"
    (service,) = [a for c, a in calls if c == "service"]
    assert service["service"] == "llmfleet-gateway-agent.socket" and service["restarted"] is True
    assert service["daemon_reload"] is True and service["enabled"] is True


def test_a_host_that_is_neither_does_nothing_and_says_why(monkeypatch):
    calls, noops = planned(monkeypatch, "build-1")
    assert calls == [] and noops == ["gateway: neither a gateway host (gateway_group 'gateways') nor a serving host"]


def test_a_gateway_host_that_serves_is_refused_before_any_operation(monkeypatch):
    INVENTORY.append(InventoryHost("gw-2", ["gateways"], ssh_hostname="10.0.0.3"))
    try:
        with pytest.raises(ops.OperationValueError) as exc:
            planned(monkeypatch, "gw-2")
    finally:
        INVENTORY.pop()
    assert str(exc.value).startswith("host gw-2: the host is in gateway_group 'gateways' and vllm_enabled is True")
    assert str(exc.value).endswith("; nothing was changed")
