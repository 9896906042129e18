"""A deploy file that reads the systemd unit facts pyinfra's systemd.service asks (one unit each, and two
together) through llmfleet's fact memo, and prints them with the memo's counts (tests/integration/test_lab.py)."""
import json

from pyinfra import host
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from llmfleet.pyinfra_patches import fact_memo as factmemo

factmemo.install()
# running and enabled; an alias of it; none such; dead and static; dead and disabled; running and static
UNITS = ["ssh.service", "sshd.service", "no-such-unit.service", "e2scrub_all.service", "debug-shell.service",
         "systemd-journald.service"]
out = {u: [host.get_fact(SystemdStatus, services=[u]), host.get_fact(SystemdEnabled, services=[u])] for u in UNITS}
out["two"] = host.get_fact(SystemdStatus, services=["ssh.service", "systemd-journald.service"])
memo = factmemo.memo_of(host.state)
print("FACTS", json.dumps({"values": out, "batches": memo.batches, "prefetched": memo.prefetched,
                          "joined": memo.joined}, sort_keys=True))
