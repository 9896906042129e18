"""log_forwarding as data: rsyslog's forwarding configuration for a host. Pure: the deploy
(operations/log_forwarding.py) writes it, verify (verify/test_log_forwarding.py) compares the host with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmfleet import templates

if TYPE_CHECKING:
    from llmfleet.schema import Settings

# log_forwarding: the distribution's rsyslog, one file of llmfleet's in its drop-in folder (read
# before Debian's own rules in /etc/rsyslog.conf: $IncludeConfig comes first)
RSYSLOG_PACKAGE = "rsyslog"
RSYSLOG_SERVICE = "rsyslog.service"
FORWARD_CONF = "/etc/rsyslog.d/60-llmfleet-forward.conf"
FORWARD_QUEUE = "llmfleet-forward"  # the queue's files in rsyslog's work folder (/var/spool/rsyslog on Debian)


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
    return templates.render(
        "log_forwarding", "60-llmfleet-forward.conf.j2", target=target, port=port, host_name=host_name,
        unit_regex=regex, units=bool(settings.log_forward_units), kernel=settings.log_forward_kernel,
        queue=FORWARD_QUEUE, max_mb=settings.log_forward_queue_max_mb, retry_s=settings.log_forward_retry_s)
