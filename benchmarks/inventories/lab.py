"""The fleet-scale benchmark's lab as a pyinfra inventory (benchmarks/fleet_scale.py brings it up).

The lab's container hosts, named and reached as inventories/lab.py names them (this file is named
lab.py too, so its hosts are in group `lab` and group_data/lab.py applies), with vLLM left out
(`vllm_enabled = False`, host data) on all but the last LLMFLEET_BENCH_SERVING hosts (default 3):
24 CPU vLLM servers would not fit the 2 cores the benchmark runs on.
"""

import os

from llmfleet.lab.inventory import lab_groups

_serving = int(os.environ.get("LLMFLEET_BENCH_SERVING", "3"))
_hosts = lab_groups()["lab_containers"]

lab_containers = [(name, {**data, "vllm_enabled": i >= len(_hosts) - _serving})
                  for i, (name, data) in enumerate(_hosts)]
