"""The fleet gateway: HAProxy (the distribution's package) on the inventory's gateway hosts
(gateway_group), in front of every serving host's endpoint, and the agent on each serving host that
tells the gateways whether to send it requests.

- The gateway balances round-robin by weight over the serving hosts its health checks (GET
  /health on each host's vllm_port: its front door, or vllm.service where it has none) have up,
  and asks each host's agent (HAProxy's agent-check) every gateway_agent_interval_ms. Weights,
  not least connections: a canary cohort's share of the requests is its weight's share at any load
  (llmfleet/rollout.py), where leastconn ignores weights while servers are idle.
- The agent is a systemd socket on gateway_agent_port: each connection gets the content of
  AGENT_STATE, "ready 100%", "ready N%" (a canary's share) or "drain" (HAProxy 2.6 configuration
  manual, 5.2 "agent-check": the word "drain" turns the server's administrative state to DRAIN,
  no new requests; "ready" cancels it; "N%" sets its weight relative to the configured one).
  Only the agent undoes what the agent did, so the state is a file that outlives a reboot, and
  the deploy writes "ready 100%".
- A roll (operations/vllm_roll.py) drains a host there before restarting it: the state "drain",
  then twice the agent interval (every gateway has asked), then until the host's own vLLM has no
  request running or waiting (at most vllm_drain_timeout_s); after the restart and the host's
  readiness, "ready 100%" and the wait for the gateways' checks to have it up (up_wait_s). Hosts
  are drained there only where the inventory has gateway hosts (``has_gateways``).

Pure functions of the settings and the inventory's hosts: the deploy renders with them, verify
compares the host's files with the same rendering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmfleet import frontdoor, rollout, templates
from llmfleet.remote import python_script

if TYPE_CHECKING:
    from llmfleet.schema import Settings

# the distribution's HAProxy, as on a front door's host: its configuration file, unit, package,
# runtime API socket, and the health checks' rise and fall (llmfleet/frontdoor.py cites them)
CONFIG_PATH, SERVICE, PACKAGE, ADMIN_SOCKET = (frontdoor.CONFIG_PATH, frontdoor.SERVICE, frontdoor.PACKAGE,
                                               frontdoor.ADMIN_SOCKET)
RISE, FALL = frontdoor.RISE, frontdoor.FALL
BACKEND = "fleet"
# the agent on every serving host: a socket unit, a service instance per connection
AGENT_UNIT = "llmfleet-gateway-agent"
AGENT_SOCKET = f"{AGENT_UNIT}.socket"
AGENT_DIR = "/var/lib/llmfleet/gateway-agent"
AGENT_STATE = f"{AGENT_DIR}/state"
READY = "ready 100%"  # in rotation at its configured weight
DRAIN = "drain"  # no new requests; those it has finish


@dataclass(frozen=True)
class Server:
    """A serving host behind the gateway: its inventory name, address and vllm_port."""

    name: str
    address: str
    port: int


def serving_hosts(hosts: list[tuple[str, str, Settings, list[str]]], group: str) -> list[Server]:
    """The servers of the gateway's backend: of the inventory's hosts, (name, address, settings,
    groups), each that serves (vllm_enabled) and is not itself a gateway host, by name."""
    return sorted((Server(name, address, s.vllm_port) for name, address, s, groups in hosts
                   if s.vllm_enabled and group not in groups), key=lambda srv: srv.name)


def has_gateways(groups_of_hosts: list[list[str]], group: str) -> bool:
    """Whether the inventory (each host's groups) has gateway hosts: only then does a roll drain a
    host at the gateway."""
    return any(group in groups for groups in groups_of_hosts)


def problems(settings: Settings, is_gateway: bool) -> list[str]:
    """What a gateway host cannot be: a serving host (its HAProxy would take the front door's
    place), or one whose gateway ports another service of the host takes."""
    if not is_gateway:
        return []
    out = []
    if settings.vllm_enabled:
        out.append(f"the host is in gateway_group {settings.gateway_group!r} and vllm_enabled is True: a gateway "
                   "host serves no model itself (fix: vllm_enabled = False in the gateway group's data, or take "
                   "the host out of the group)")
    ports = {"gateway_port": settings.gateway_port, "gateway_metrics_port": settings.gateway_metrics_port}
    ports |= {f"host_service_ports.{name}": port for name, port in settings.host_service_ports.items()}
    by_port: dict[int, list[str]] = {}
    for what, port in ports.items():
        by_port.setdefault(port, []).append(what)
    out += [f"port {port} is taken twice on the gateway host: by {' and by '.join(whats)} (fix: give each its own "
            "port)" for port, whats in sorted(by_port.items()) if len(whats) > 1]
    return out


def render_config(settings: Settings, servers: list[Server]) -> str:
    """haproxy.cfg of a gateway host, over `servers` (serving_hosts)."""
    return templates.render("gateway", "haproxy.cfg.j2",
        admin_socket=ADMIN_SOCKET, timeout_s=settings.gateway_timeout_s, port=settings.gateway_port,
        metrics_port=settings.gateway_metrics_port, check_interval_ms=settings.gateway_check_interval_ms,
        rise=RISE, fall=FALL, agent_port=settings.gateway_agent_port,
        agent_interval_ms=settings.gateway_agent_interval_ms, backend=BACKEND, servers=servers,
        weight=rollout.CONFIGURED_WEIGHT, synthetic_header=rollout.SYNTHETIC_HEADER,
        served_by_header=rollout.SERVED_BY_HEADER)


def render_agent(settings: Settings) -> dict[str, str]:
    """The agent's units on a serving host: {path: content}."""
    return {f"/etc/systemd/system/{AGENT_SOCKET}": templates.render("gateway", "agent.socket.j2",
                                                                    port=settings.gateway_agent_port, unit=AGENT_UNIT),
            f"/etc/systemd/system/{AGENT_UNIT}@.service": templates.render("gateway", "agent@.service.j2",
                                                                           state=AGENT_STATE)}


def drained_wait_s(settings: Settings) -> float:
    """After "drain" is written: every gateway has asked the agent (twice its interval)."""
    return 2 * settings.gateway_agent_interval_ms / 1000


def up_wait_s(settings: Settings) -> float:
    """After "ready" is written: every gateway has asked the agent, and its checks have the host up
    (`rise` passing checks), with one interval of each to spare."""
    return (2 * settings.gateway_agent_interval_ms + (RISE + 1) * settings.gateway_check_interval_ms) / 1000


def agent_command(settings: Settings, state: str) -> str:
    """The host command that sets the agent's answer and waits for the gateways to act on it
    (llmfleet/remote/gateway_agent.py): drain (then until the host's vLLM has no request running
    or waiting, at most vllm_drain_timeout_s) or ready."""
    if state == DRAIN:
        return python_script("gateway_agent", "drain", AGENT_STATE, str(drained_wait_s(settings)),
                             str(settings.vllm_port), str(settings.vllm_drain_timeout_s))
    return python_script("gateway_agent", "ready", AGENT_STATE, str(up_wait_s(settings)))


def hold_command(settings: Settings, who: str) -> str:
    """The host command that holds the host out of rotation (`llmfleet tune`): drained as by
    agent_command, and a roll's "ready" leaves it drained until release_command."""
    return python_script("gateway_agent", "hold", AGENT_STATE, str(drained_wait_s(settings)),
                         str(settings.vllm_port), str(settings.vllm_drain_timeout_s), who)


def release_command(settings: Settings) -> str:
    """The host command that ends a hold and puts the host back in rotation (as agent_command's ready)."""
    return python_script("gateway_agent", "release", AGENT_STATE, str(up_wait_s(settings)))


def weight_command(settings: Settings, percent: int) -> str:
    """The host command that sets the agent's answer to "ready N%" (a canary's share: N% of the
    configured weight) and waits until every gateway has asked the agent."""
    return python_script("gateway_agent", "ready", AGENT_STATE, str(drained_wait_s(settings)), str(percent))


def hook_argv(settings: Settings, host: str, state: str) -> list[str] | None:
    """gateway_drain_hook's command for this host and state, or None without a hook."""
    if not settings.gateway_drain_hook:
        return None
    return [a.replace("{host}", host).replace("{state}", state) for a in settings.gateway_drain_hook]
