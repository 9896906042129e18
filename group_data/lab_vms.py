"""Settings for the lab's VM hosts (group `lab_vms`): full kernels under software emulation."""

# vLLM on an emulated CPU would take many minutes to start: the VM proves the kernel-level
# settings, the containers serve.
vllm_enabled = False
