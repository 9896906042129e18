"""The front door of a host serving a layout: HAProxy (the distribution's package) on vllm_port,
balancing over the host's vLLM instances (llmfleet/vllm_layout.py) by least connections, each
health-checked on /health, with HAProxy's own Prometheus metrics on vllm_frontdoor_metrics_port.

Pure functions of the settings: the deploy renders the configuration with them, verify compares
the host's file with the same rendering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmfleet import templates, vllm_layout
from llmfleet.vllm import INSTANCE_HOST

if TYPE_CHECKING:
    from llmfleet.schema import Settings

CONFIG_PATH = "/etc/haproxy/haproxy.cfg"  # the Debian package's own, read by haproxy.service
SERVICE = vllm_layout.FRONTDOOR_UNIT
PACKAGE = "haproxy"
ADMIN_SOCKET = "/run/haproxy/admin.sock"  # Debian's default runtime API socket
BACKEND = "vllm_instances"


def instance_path(name: str) -> str:
    """Where the front door's service port serves one instance on its own (the rest of the path
    is the instance's own: /instances/<name>/v1/completions is its /v1/completions)."""
    return f"/instances/{name}"


def instance_metrics_path(name: str) -> str:
    """Where the front door's metrics port serves an instance's own /metrics."""
    return f"/instances/{name}/metrics"


def render_config(settings: Settings) -> str:
    """haproxy.cfg for the host's layout (a host without one has no front door)."""
    instances = vllm_layout.instances(settings)
    if instances is None:
        raise ValueError("no vllm_layout: a host without a layout has no front door")
    return templates.render("frontdoor", "haproxy.cfg.j2",
        admin_socket=ADMIN_SOCKET, timeout_s=settings.vllm_frontdoor_timeout_s, bind_host=settings.vllm_host,
        port=settings.vllm_port, metrics_port=settings.vllm_frontdoor_metrics_port,
        check_interval_ms=settings.vllm_frontdoor_check_interval_ms,
        servers=[{"name": i.name, "address": INSTANCE_HOST, "port": i.port} for i in instances])
