"""HGX A100 8-GPU 80GB (group a100_sxm4 of inventories/prod.py). Six NVSwitches: the driver's apt
transaction brings Fabric Manager at the same version, and vLLM starts after it."""

gpu_profile = "a100_sxm4_80gb_x8"
nvidia_driver_flavour = "open"  # NVIDIA recommends the open kernel modules from Turing on
cuda_toolkit_version = "13.0"  # CUDA 13 runs on Ampere (it dropped Volta only); needs R580, which the fleet has

# Llama-3.1-70B-Instruct in bf16 (Ampere has bfloat16): 140 GB of weights over 8 x 80 GB. An fp8 KV
# cache doubles the tokens it holds; on A100, vLLM 0.19.1 gives it to FlashInfer (FlashAttention 2 has
# none) -- `llmfleet layout` says so. source and sha256 are examples.
vllm_model = {"name": "llama-3.1-70b-instruct", "version": "2024-07-23",
              "source": "https://models.internal/llama-3.1-70b-instruct-2024-07-23.tar", "sha256": "0" * 64,
              "torch_dtype": "bfloat16", "num_attention_heads": 64}
vllm_flags = {
    "dtype": "bfloat16",
    "tensor-parallel-size": 8,  # NVSwitch: every pair at full NVLink bandwidth
    "kv-cache-dtype": "fp8",
    "max-model-len": 8192,
    "gpu-memory-utilization": 0.90,
    "max-num-seqs": 256,
    "scheduling-policy": "fcfs",
}
