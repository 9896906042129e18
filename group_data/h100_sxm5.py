"""HGX H100 8-GPU (group h100_sxm5 of inventories/prod.py). Four NVSwitches: Fabric Manager comes with
the driver, and vLLM starts after it."""

gpu_profile = "h100_sxm5_80gb_x8"
nvidia_driver_flavour = "open"
cuda_toolkit_version = "13.0"

# Llama-3.1-70B-Instruct (bf16 checkpoint) quantized to FP8 as it loads: Hopper runs FP8 natively (W8A8),
# and an fp8 KV cache stays on FlashAttention 3 (fp8 / fp8_e4m3 only: fp8_e5m2 is refused in vLLM 0.19.1).
# source and sha256 are examples.
vllm_model = {"name": "llama-3.1-70b-instruct", "version": "2024-07-23",
              "source": "https://models.internal/llama-3.1-70b-instruct-2024-07-23.tar", "sha256": "0" * 64,
              "torch_dtype": "bfloat16", "num_attention_heads": 64}
vllm_flags = {
    "dtype": "bfloat16",
    "quantization": "fp8",
    "kv-cache-dtype": "fp8",
    "tensor-parallel-size": 4,  # 70B in FP8 is 70 GB: four GPUs hold it and a large KV cache
    "max-model-len": 16384,
    "gpu-memory-utilization": 0.90,
    "max-num-seqs": 256,
    "scheduling-policy": "fcfs",
}
