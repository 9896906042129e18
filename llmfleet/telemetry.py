"""The telemetry a host runs with, as data: the node exporter's arguments, DCGM's and
dcgm-exporter's packages, unit and counters file, and rsyslog's forwarding configuration.

Pure functions of the settings: the deploy (operations/node_exporter.py, dcgm_exporter.py,
log_forwarding.py) writes what they render, verify compares the host with the same rendering.
Facts: ../shared/facts/gpu-generations.md section 3 (DCGM, dcgm-exporter).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, FileSystemLoader, StrictUndefined

if TYPE_CHECKING:
    from llmfleet.schema import Settings

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"

# node_exporter: Debian's package, its unit and the file its unit reads ARGS from
# (/lib/systemd/system/prometheus-node-exporter.service: EnvironmentFile=/etc/default/prometheus-node-exporter)
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_SERVICE = "prometheus-node-exporter.service"
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
HOST_METRICS_FILE = "llmfleet_host.prom"  # what llmfleet-host-metrics writes into the textfile folder
HOST_METRICS_SCRIPT = "/usr/local/lib/llmfleet/llmfleet-host-metrics"
HOST_METRICS_UNIT = "llmfleet-host-metrics"  # .service (oneshot) and .timer

# DCGM 4 (DCGM cmake/packaging.cmake: datacenter-gpu-manager-4-core, -4-cuda<major>; epoch 1)
DCGM_PACKAGES = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda{cuda_major}")
DCGM_DEB_VERSION = "1:{version}-1"
DCGM_SERVICE = "nvidia-dcgm.service"  # DCGM config-files/systemd/nvidia-dcgm.service.in (nv-hostengine)
DCGM_HOSTENGINE = "localhost:5555"  # DCGM dcgm_structs.h DCGM_HE_PORT_NUMBER 5555
# dcgm-exporter: its unit's name (dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service);
# llmfleet writes the whole unit in /etc/systemd/system, which takes precedence over a package's
EXPORTER_SERVICE = "nvidia-dcgm-exporter.service"
EXPORTER_UNIT_PATH = f"/etc/systemd/system/{EXPORTER_SERVICE}"
EXPORTER_COUNTERS = "/etc/dcgm-exporter/llmfleet-counters.csv"
EXPORTER_PACKAGE_BINARY = "/usr/bin/dcgm-exporter"  # where the package (and the archive's tree) puts it
EXPORTER_ARCHIVE_ROOT = "/opt/llmfleet/dcgm-exporter"  # <root>/<version>/ holds an unpacked release archive
EXPORTER_ARCHIVE_CACHE = "/var/cache/llmfleet"

# log_forwarding: the distribution's rsyslog, one file of llmfleet's in its drop-in folder (read
# before Debian's own rules in /etc/rsyslog.conf: $IncludeConfig comes first)
RSYSLOG_PACKAGE = "rsyslog"
RSYSLOG_SERVICE = "rsyslog.service"
FORWARD_CONF = "/etc/rsyslog.d/60-llmfleet-forward.conf"
FORWARD_QUEUE = "llmfleet-forward"  # the queue's files in rsyslog's work folder (/var/spool/rsyslog on Debian)


def _env(component: str) -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES / component)), undefined=StrictUndefined,
                       keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def local_url(address: str, port: int, path: str = "/metrics") -> str:
    """Where a process on the host itself reaches an exporter listening on `address`."""
    host = "127.0.0.1" if address in ("0.0.0.0", "::") else address
    return f"http://{listen(host, port)}{path}"


# node_exporter
# Only the textfile collector's metrics, for a check that reads llmfleet's own: node_exporter's
# `collect[]` query parameter (README "Filtering enabled collectors"; node_exporter.go reads
# r.URL.Query()["collect[]"]). On the lab's Debian node_exporter 1.5.0: 147 lines in 2 ms against
# 1943 lines in 62 ms for every collector. node_textfile_scrape_error is the textfile collector's own.
NODE_EXPORTER_TEXTFILE_PATH = "/metrics?collect%5B%5D=textfile"


def node_exporter_args(settings: Settings) -> str:
    address = listen(settings.node_exporter_address, settings.host_service_ports["node_exporter"])
    return f"--web.listen-address={address} --collector.textfile.directory={settings.node_exporter_textfile_dir}"


def node_exporter_defaults(settings: Settings) -> str:
    return _env("node_exporter").get_template("prometheus-node-exporter.j2").render(args=node_exporter_args(settings))


def host_metrics_script(settings: Settings) -> str:
    return _env("node_exporter").get_template("llmfleet-host-metrics.j2").render(
        textfile_dir=settings.node_exporter_textfile_dir, metrics_file=HOST_METRICS_FILE,
        models_dir=settings.vllm_models_dir)


def host_metrics_units(settings: Settings) -> dict[str, str]:
    """{unit file name: content} of the host metrics' service and timer."""
    env = _env("node_exporter")
    return {f"{HOST_METRICS_UNIT}.service": env.get_template(f"{HOST_METRICS_UNIT}.service.j2").render(
                script=HOST_METRICS_SCRIPT),
            f"{HOST_METRICS_UNIT}.timer": env.get_template(f"{HOST_METRICS_UNIT}.timer.j2").render(
                interval_s=settings.node_exporter_metrics_interval_s)}


# dcgm_exporter
def dcgm_packages(settings: Settings) -> dict[str, str]:
    """{package: exact Debian version} of DCGM, and of dcgm-exporter where it comes as NVIDIA's package."""
    cuda_major = settings.cuda_toolkit_version.split(".")[0]
    packages = {name.format(cuda_major=cuda_major): DCGM_DEB_VERSION.format(version=settings.dcgm_version)
                for name in DCGM_PACKAGES}
    if settings.dcgm_exporter_package is not None:
        packages[settings.dcgm_exporter_package.name] = settings.dcgm_exporter_package.version
    return packages


def exporter_binary(settings: Settings) -> str:
    archive = settings.dcgm_exporter_archive
    if settings.dcgm_exporter_package is not None or archive is None:
        return EXPORTER_PACKAGE_BINARY
    return f"{EXPORTER_ARCHIVE_ROOT}/{archive.version}{EXPORTER_PACKAGE_BINARY}"


def exporter_command(settings: Settings) -> list[str]:
    """dcgm-exporter's command line: our counters, the address from group data, DCGM's host engine
    (nvidia-dcgm.service) instead of an engine of its own (without -r it embeds one: dcgm-exporter
    pkg/cmd/app.go, UseRemoteHE only when the flag is given)."""
    return [exporter_binary(settings), "-f", EXPORTER_COUNTERS,
            "-a", listen(settings.dcgm_exporter_address, settings.host_service_ports["dcgm_exporter"]),
            "-r", DCGM_HOSTENGINE, "-c", str(settings.dcgm_exporter_interval_ms)]


def exporter_unit(settings: Settings) -> str:
    return _env("dcgm_exporter").get_template("nvidia-dcgm-exporter.service.j2").render(
        command=" ".join(exporter_command(settings)))


def counters_csv(settings: Settings) -> str:
    return _env("dcgm_exporter").get_template("llmfleet-counters.csv.j2").render(
        counters=settings.dcgm_exporter_counters)


# log_forwarding
def unit_regex(patterns: list[str]) -> str:
    """Shell patterns of unit names as one POSIX extended regular expression (rsyslog's re_match)."""
    def one(p: str) -> str:
        return "".join(".*" if c == "*" else "." if c == "?" else "\\." if c == "." else c for c in p)

    return "^(" + "|".join(one(p) for p in patterns) + ")$"


def forward_config(settings: Settings, host_name: str) -> str | None:
    """rsyslog's forwarding file for the host (None: nothing forwarded)."""
    if settings.log_forward_target is None:
        return None
    target, port = settings.log_forward_target.rsplit(":", 1)
    # in an rsyslog string a backslash and a $ are escaped with a backslash
    regex = unit_regex(settings.log_forward_units).replace("\\", "\\\\").replace("$", "\\$")
    return _env("log_forwarding").get_template("60-llmfleet-forward.conf.j2").render(
        target=target, port=port, host_name=host_name, unit_regex=regex, units=bool(settings.log_forward_units),
        kernel=settings.log_forward_kernel, queue=FORWARD_QUEUE, max_mb=settings.log_forward_queue_max_mb,
        retry_s=settings.log_forward_retry_s)
