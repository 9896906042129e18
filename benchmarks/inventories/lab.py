"""The fleet-scale benchmark's lab as a pyinfra inventory (benchmarks/fleet_scale.py brings it up).

The lab's container hosts, named and reached as inventories/lab.py names them (this file is named
lab.py too, so its hosts are in group `lab` and group_data/lab.py applies), with vLLM left out
(`vllm_enabled = False`, host data) on all but the last LLMFLEET_BENCH_SERVING hosts (default 3):
24 CPU vLLM servers would not fit the 2 cores the benchmark runs on. The hosts write their own
metrics (llmfleet-host-metrics.timer) and audit themselves (llmfleet-self-audit.timer) at the
fleet's intervals, the defaults node_exporter_metrics_interval_s (60 s) and self_audit_interval_s
(1 h), not the lab's 5 s and 60 s (group_data/lab.py: so that the tests see a fresh metric within
seconds): 24 hosts writing every 5 s took 0.09 CPU s a second of the
machine's 2 cores (the idle lab 0.147 with the timers, 0.058 without), work that a real
fleet's hosts do on their own cores, as they serve their own node exporters to a Prometheus the
benchmark pauses.
"""

import os

from llmfleet.lab.inventory import lab_groups
from llmfleet.schema import defaults

_serving = int(os.environ.get("LLMFLEET_BENCH_SERVING", "3"))
_hosts = lab_groups()["lab_containers"]
_interval = defaults()["node_exporter_metrics_interval_s"]  # the fleet's, not the lab's 5 s
_self_audit = defaults()["self_audit_interval_s"]  # the fleet's (an hour), not the lab's minute

lab_containers = [(name, {**data, "vllm_enabled": i >= len(_hosts) - _serving,
                          "node_exporter_metrics_interval_s": _interval, "self_audit_interval_s": _self_audit})
                  for i, (name, data) in enumerate(_hosts)]
