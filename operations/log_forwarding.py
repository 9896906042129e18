"""log_forwarding: the journal of vLLM's, the NVIDIA services' and llmfleet's own units, and the
kernel's messages, forwarded by the distribution's rsyslog to the central receiver of group data
(TCP, a disk-assisted queue: a receiver outage loses nothing), or nothing forwarded when none is
configured (install, configure, activate). What it renders: llmfleet/log_forwarding.py."""


from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import server, systemd

from llmfleet import log_forwarding
from llmfleet.settings import Settings
from operations import apt_installed, managed_files


@deploy("log_forwarding")
def configure(settings: Settings):
    """rsyslog forwards what group data names to log_forward_target; None removes llmfleet's forwarding."""
    config = log_forwarding.forward_config(settings, host.name)
    if config is None:
        why = "log_forwarding: log_forward_target is None: logs stay on the host (llmfleet's forwarding file removed)"
        host.noop(why)
        host.log_styled(why, fg="yellow", log_func=logger.info)
        removed = managed_files.absent("no forwarding file", log_forwarding.FORWARD_CONF)
        if removed.will_change:
            server.shell(name="rsyslog restarted without the forwarding", commands=["systemctl try-restart rsyslog"])
        return
    # install
    apt_installed("rsyslog is installed", [log_forwarding.RSYSLOG_PACKAGE], settings.apt_cache_valid_s,
                  no_recommends=True)
    # configure: checked by rsyslog itself before it restarts with it (a refused file stops the deploy here,
    # and the running rsyslog keeps forwarding with what it had)
    conf = managed_files.put(f"rsyslog forwards to {settings.log_forward_target}", log_forwarding.FORWARD_CONF,
                             config)
    if conf.will_change:
        server.shell(name="rsyslog accepts its configuration", commands=["rsyslogd -N1 -f /etc/rsyslog.conf"])
    # activate
    systemd.service(name="rsyslog is enabled and running", service=log_forwarding.RSYSLOG_SERVICE, running=True,
                    enabled=True, restarted=conf.will_change)
