"""HGX H200 8-GPU 141GB (group h200_sxm of inventories/prod.py). Four NVSwitches: Fabric Manager comes
with the driver, and vLLM starts after it."""

gpu_profile = "h200_sxm_141gb_x8"
nvidia_driver_flavour = "open"
cuda_toolkit_version = "13.0"

# Llama-3.1-405B-Instruct-FP8, quantized by its maker (config.json quant_method "fbgemm_fp8", 128
# attention heads): about 410 GB of weights over 8 x 141 GB. source and sha256 are examples.
vllm_model = {"name": "llama-3.1-405b-instruct-fp8", "version": "2024-07-23",
              "source": "https://models.internal/llama-3.1-405b-instruct-fp8-2024-07-23.tar", "sha256": "0" * 64,
              "torch_dtype": "bfloat16", "num_attention_heads": 128, "quantization": "fbgemm_fp8"}
vllm_flags = {
    "dtype": "bfloat16",
    "kv-cache-dtype": "fp8",
    "tensor-parallel-size": 8,
    "max-model-len": 16384,
    "gpu-memory-utilization": 0.92,
    "max-num-seqs": 128,
    "scheduling-policy": "fcfs",
}
