"""Run on a host by the verify suite: the NVIDIA GPUs on the PCI bus (their slots), as JSON."""

import json

from _helpers import pci_gpus  # llmfleet/remote/_helpers.py, sent along by python_script

print(json.dumps([g["slot"] for g in pci_gpus()]))
