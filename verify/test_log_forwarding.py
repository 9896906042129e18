"""log_forwarding: with log_forward_target, rsyslog active and enabled with llmfleet's forwarding
file as rendered from group data, and the whole configuration accepted by rsyslog itself; without
one, no forwarding file."""

import json

from llmfleet import log_forwarding
from verify.helpers import expect, run_remote


def test_logs_are_forwarded_as_group_data_says(host, host_name, settings):
    want = log_forwarding.forward_config(settings, host_name)
    check = [["rsyslogd", "-N1", "-f", "/etc/rsyslog.conf"]] if want is not None else []
    state = run_remote(host, "telemetry_state", json.dumps({
        "units": [log_forwarding.RSYSLOG_SERVICE], "files": [log_forwarding.FORWARD_CONF], "check": check}))
    found = state["files"][log_forwarding.FORWARD_CONF]
    expect(host_name,
           f"{log_forwarding.FORWARD_CONF} (log_forward_target {settings.log_forward_target}, log_forward_*)", want,
           found["content"] if found else None)
    if want is None:
        return
    expect(host_name, "rsyslog", {"active": "active", "enabled": "enabled"},
           state["units"][log_forwarding.RSYSLOG_SERVICE])
    result = state["checks"][0]
    assert result["rc"] == 0, (f"{host_name}: rsyslog's configuration (rsyslogd -N1): expected accepted, actual "
                               f"exit {result['rc']}: {result['output']}")
