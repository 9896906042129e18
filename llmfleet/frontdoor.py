"""The front door of a host serving a layout: HAProxy (the distribution's package) on vllm_port,
balancing over the host's vLLM instances (llmfleet/layout.py) by least connections, each
health-checked on /health, with HAProxy's own Prometheus metrics on vllm_frontdoor_metrics_port.

Pure functions of the settings: the deploy renders the configuration with them, verify compares
the host's file with the same rendering.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from llmfleet import layout
from llmfleet.vllm_service import INSTANCE_HOST

if TYPE_CHECKING:
    from llmfleet.schema import Settings

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "frontdoor"
CONFIG_PATH = "/etc/haproxy/haproxy.cfg"  # the Debian package's own, read by haproxy.service
SERVICE = layout.FRONTDOOR_UNIT
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
    instances = layout.instances(settings)
    if instances is None:
        raise ValueError("no vllm_layout: a host without a layout has no front door")
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, lstrip_blocks=True)
    return env.get_template("haproxy.cfg.j2").render(
        admin_socket=ADMIN_SOCKET, timeout_s=settings.vllm_frontdoor_timeout_s, bind_host=settings.vllm_host,
        port=settings.vllm_port, metrics_port=settings.vllm_frontdoor_metrics_port,
        check_interval_ms=settings.vllm_frontdoor_check_interval_ms,
        servers=[{"name": i.name, "address": INSTANCE_HOST, "port": i.port} for i in instances])
