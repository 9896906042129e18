"""Run on a host by the verify suite: the NVIDIA GPUs on the PCI bus (their slots), as JSON."""

# pci_gpus() comes from _helpers.py, which llmfleet.remote.python_script puts in front
# ruff: noqa: F821

import json

print(json.dumps([g["slot"] for g in pci_gpus()]))
