"""gateway: the fleet gateway on the inventory's gateway hosts (gateway_group), and on every serving
host the agent the gateways ask whether to send it requests (llmfleet/gateway.py renders both).

- On a gateway host: HAProxy (the distribution's package) installed, its configuration rendered
  over every serving host of the inventory (a host added to or removed from the inventory changes
  it at the next deploy of the gateway), reloaded when it changes (Debian's haproxy.service checks
  it first, `haproxy -c`, and keeps the running one if it is bad).
- On a serving host: the agent's socket and service units, and its state file "ready 100%" (the
  roll writes "drain" while it restarts the host, and "ready 100%" once it is ready again).
"""

from __future__ import annotations

from pyinfra import host, inventory
from pyinfra.api import deploy
from pyinfra.api.exceptions import OperationValueError
from pyinfra.operations import systemd

from llmfleet import gateway
from llmfleet.settings import Settings, settings_for
from operations import apt_installed, managed_files


def inventory_hosts() -> list[tuple[str, str, Settings, list[str]]]:
    """Every host of the inventory (those a --limit leaves out too): name, address, settings, groups."""
    return [(h.name, h.data.get("ssh_hostname") or h.name, settings_for(h), list(h.groups)) for h in inventory]


def is_gateway(settings: Settings) -> bool:
    return settings.gateway_group in host.groups


@deploy("gateway")
def configure(settings: Settings):
    """The gateway's HAProxy on a gateway host; the agent on a serving host; nothing elsewhere."""
    problems = gateway.problems(settings, is_gateway(settings))
    if problems:
        raise OperationValueError(f"host {host.name}: " + "; ".join(problems) + "; nothing was changed")
    if is_gateway(settings):
        _gateway(settings)
    elif settings.vllm_enabled:
        _agent(settings)
    else:
        host.noop(f"gateway: neither a gateway host (gateway_group {settings.gateway_group!r}) nor a serving host")


def _gateway(settings: Settings) -> None:
    servers = gateway.serving_hosts(inventory_hosts(), settings.gateway_group)
    # install
    apt_installed("gateway: haproxy is installed", [gateway.PACKAGE], settings.apt_cache_valid_s, no_recommends=True)
    # configure
    config = managed_files.put(f"gateway: haproxy.cfg balances over the fleet's {len(servers)} serving host(s)",
                               gateway.CONFIG_PATH, gateway.render_config(settings, servers))
    # activate
    systemd.service(name="gateway: haproxy is enabled and running", service=gateway.SERVICE, running=True,
                    enabled=True, reloaded=config.will_change)


def _agent(settings: Settings) -> None:
    # configure
    managed_files.directory("gateway: agent state folder", gateway.AGENT_DIR)
    managed_files.put("gateway: agent answers the gateways 'ready 100%' (a roll drains the host there)",
                      gateway.AGENT_STATE, gateway.READY + "\n")
    units = [managed_files.put(f"gateway: {path.rsplit('/', 1)[1]}", path, content)
             for path, content in gateway.render_agent(settings).items()]
    # activate
    changed = any(u.will_change for u in units)
    systemd.service(name=f"gateway: {gateway.AGENT_SOCKET} is enabled and listening", service=gateway.AGENT_SOCKET,
                    running=True, enabled=True, restarted=changed, daemon_reload=changed)
