"""The GPU machine the `device` tool lends (one NVIDIA H200, or two or four: nvidia-h200-x2, -x4),
checked from itself (@local).

Read-only: only the verify suite runs there, never a deploy (its clocks, persistence, ECC and MIG
are not ours to change). What the machine is, as read with NVML, is the profile
h200_141gb_x1 in group_data/all.py (h200_141gb_x2 / _x4 for the kinds with two / four GPUs, chosen
here by the number of GPUs the driver lists); the rest is its software as found: driver 580.159.04 with the
open kernel module, PyTorch and nvidia-ml-py in /opt/torch/.venv. It serves nothing (vllm_enabled
False): vllm_flags only keep the tensor-parallel size within its GPU count. Its CUDA toolkit (13.0,
/usr/local/cuda-13.0) is not named here: none of these checks reads cuda_toolkit_version, and a
V100 host's data could not name 13.0 (CUDA 13 dropped Volta), so it stays group data's.

    make verify-device                                  # on that machine: passes (Fabric Manager: its GPU
                                                        # reports no fabric, no NVSwitch in the VM: skips)
    make verify-device DATA="--data gpu_profile=v100_sxm2_32gb_x8 --data nvidia_driver_flavour=proprietary"
                                                        # fails as a V100 host would (its GPU checks)
    make verify-device DATA="--data gpu_profile=a100_sxm4_80gb_x8"
    make verify-device DATA="--data gpu_profile=h100_sxm5_80gb_x8"
    make verify-device DATA="--data gpu_profile=rtx4090_24gb"
                                                        # fail as an HGX A100, HGX H100 or RTX 4090 host would
                                                        # (count, model, memory, NVSwitches, Fabric Manager,
                                                        # fabric state, clocks: expected and actual)

A V100 host's data differs from this one in its profile and its kernel modules (Volta runs the
proprietary ones only: the guardrails refuse the open ones for it). tests/unit/test_documented_commands.py
resolves each of these lines and validates the settings they give.
"""

import os

_GPUS = "/proc/driver/nvidia/gpus"
_N_GPUS = len(os.listdir(_GPUS)) if os.path.isdir(_GPUS) else 0

device = [
    ("@local", {
        "_sudo": False,  # root there, and no sudo installed
        "gpu_profile": {2: "h200_141gb_x2", 4: "h200_141gb_x4"}.get(_N_GPUS, "h200_141gb_x1"),
        "nvidia_driver_version": "580.159.04",
        "nvidia_driver_flavour": "open",
        "vllm_venv": "/opt/torch/.venv",
        "vllm_enabled": False,  # checked, not served from
        "vllm_flags": {"tensor-parallel-size": 1},  # within the profile's GPU count
    }),
]
