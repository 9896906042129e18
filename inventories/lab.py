"""The local lab as a pyinfra inventory (`llmfleet lab up` first).

    pyinfra inventories/lab.py deploy.py -y

Groups: `lab_containers` (systemd-nspawn hosts sharing this machine's kernel), `lab_vms` (qemu
hosts with their own kernel), `lab_gateways` (containers running the fleet gateway in front of the
serving hosts: `llmfleet lab up --gateways 1`), and `lab` (every host; its settings are in
group_data/lab.py).
"""

from llmfleet.lab.inventory import lab_groups

_groups = lab_groups()

lab_containers = _groups["lab_containers"]
lab_vms = _groups["lab_vms"]
lab_gateways = _groups["lab_gateways"]
