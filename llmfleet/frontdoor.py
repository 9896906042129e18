"""The front door of a host serving a layout: HAProxy (the distribution's package) on vllm_port,
balancing over the host's vLLM instances (llmfleet/vllm_layout.py) round-robin by weight (a
canary's instances take their share by a runtime weight), each health-checked on /health, with
HAProxy's own Prometheus metrics on frontdoor_metrics_port.

Its unit, its runtime API and how long to wait for its health checks are here, since both the
front door's deploy (operations/frontdoor.py) and the roll (operations/vllm_roll.py: an instance
drained before its restart, back once UP) drive it. Pure functions of the settings: the deploy
renders the configuration with them, verify compares the host's file with the same rendering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmfleet import rollout, templates
from llmfleet.remote import python_script
from llmfleet.vllm import INSTANCE_HOST

if TYPE_CHECKING:
    from llmfleet.schema import Settings, VllmInstance

CONFIG_PATH = "/etc/haproxy/haproxy.cfg"  # the Debian package's own, read by haproxy.service
SERVICE = "haproxy.service"  # the distribution's HAProxy unit
PACKAGE = "haproxy"
ADMIN_SOCKET = "/run/haproxy/admin.sock"  # Debian's default runtime API socket
BACKEND = "vllm_instances"
WEIGHT = 100  # every instance's configured weight: a runtime "N%" is weight N (HAProxy 2.6 CFG 5.2 "weight")
# HAProxy's health checks: a server is UP after `rise` passing checks and DOWN after `fall` failing
# ones, one every frontdoor_check_interval_ms (the defaults: rise 2, fall 3; HAProxy 2.6
# configuration manual, "5.2. Server and default-server options": rise, fall, inter)
RISE, FALL = 2, 3
MIN_WAIT_S = 30  # the least a wait for UP is given: a loaded host answers its first check late


def up_wait_s(settings: Settings) -> int:
    """How long to wait for the front door's checks to have an instance UP (after a start, a reload
    or a roll's restart): `rise` checks at the interval, with margin (2.5 x), at least MIN_WAIT_S."""
    return max(MIN_WAIT_S, settings.frontdoor_check_interval_ms * (RISE * 5 // 2) // 1000)


def admin_command(action: str, *args: str) -> str:
    """The host command that drives the front door through its runtime API
    (llmfleet/remote/frontdoor_admin.py: state, drain NAME TIMEOUT_S, ready NAME TIMEOUT_S, serving TIMEOUT_S,
    weight NAME PERCENT)."""
    return python_script("frontdoor_admin", action, ADMIN_SOCKET, BACKEND, *args)


def instance_path(name: str) -> str:
    """Where the front door's service port serves one instance on its own (the rest of the path
    is the instance's own: /instances/<name>/v1/completions is its /v1/completions)."""
    return f"/instances/{name}"


def instance_metrics_path(name: str) -> str:
    """Where the front door's metrics port serves an instance's own /metrics."""
    return f"/instances/{name}/metrics"


def render_config(settings: Settings, instances: list[VllmInstance] | None) -> str:
    """haproxy.cfg for the host's layout, `instances` (vllm_layout.instances: None, a host without
    a layout, has no front door)."""
    if instances is None:
        raise ValueError("no vllm_layout: a host without a layout has no front door")
    return templates.render("frontdoor", "haproxy.cfg.j2",
        admin_socket=ADMIN_SOCKET, timeout_s=settings.frontdoor_timeout_s, bind_host=settings.vllm_host,
        port=settings.vllm_port, metrics_port=settings.frontdoor_metrics_port,
        check_interval_ms=settings.frontdoor_check_interval_ms, rise=RISE, fall=FALL, weight=WEIGHT,
        synthetic_header=rollout.SYNTHETIC_HEADER, served_by_header=rollout.SERVED_BY_HEADER,
        servers=[{"name": i.name, "address": INSTANCE_HOST, "port": i.port} for i in instances])
