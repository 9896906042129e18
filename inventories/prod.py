"""An example production inventory: copy it and list your own hosts.

    pyinfra inventories/prod.py deploy.py            # shows the plan, asks before changing
    pytest verify/ --hosts=ssh://admin@gpu-sxm-01,...
    llmfleet layout inventories/prod.py              # what each group resolves to, checked without a host

A group per hardware generation (each list is a group); its settings go in group_data/<group>.py
(the GPU profile, the driver flavour, the CUDA toolkit, the model and vLLM's flags that suit that
GPU). Every host is also in the group `prod` (this file's name) and in `all` (group_data/all.py
holds every default). tests/unit/test_prod_inventory.py validates each group's resolved data.
"""

# 8 x V100 SXM2 32GB (DGX-1 cube-mesh): proprietary driver R580 at most, CUDA 12, fp16, vLLM 0.19.1
v100_sxm2 = [
    ("gpu-sxm-01.example.internal", {"ssh_user": "admin"}),
    ("gpu-sxm-02.example.internal", {"ssh_user": "admin"}),
]
# HGX A100 80GB (NVSwitch: Fabric Manager), bf16
a100_sxm4 = [
    ("gpu-a100-01.example.internal", {"ssh_user": "admin"}),
]
# A100 80GB PCIe, no NVLink bridges: two-GPU instances behind the front door
a100_pcie = [
    ("gpu-a100p-01.example.internal", {"ssh_user": "admin"}),
]
# HGX H100 (NVSwitch): FP8 weights and KV cache
h100_sxm5 = [
    ("gpu-h100-01.example.internal", {"ssh_user": "admin"}),
]
# HGX H800 (NVSwitch, NVLink cut to 8 links): FP8, tensor parallelism inside the machine
h800_sxm5 = [
    ("gpu-h800-01.example.internal", {"ssh_user": "admin"}),
    ("gpu-h800-02.example.internal", {"ssh_user": "admin"}),
]
# HGX H200 141GB (NVSwitch): a pre-quantized FP8 405B model on one machine
h200_sxm = [
    ("gpu-h200-01.example.internal", {"ssh_user": "admin"}),
]
# GeForce RTX 4090 x 8, the entry tier: one instance per card, FP8 on Ada's tensor cores
rtx4090 = [
    ("gpu-4090-01.example.internal", {"ssh_user": "admin"}),
]
