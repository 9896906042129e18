"""Settings for the lab's VM hosts (group `lab_vms`): full kernels under software emulation."""

# vLLM on an emulated CPU would take many minutes to start: the VM proves the kernel-level
# settings, the containers serve.
vllm_enabled = False
# The self-audit's run (the verify suite on the host itself) under emulation would take a large share
# of the machine's 2 cores every interval: the containers prove it.
self_audit_enabled = False
