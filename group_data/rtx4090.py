"""GeForce RTX 4090 x 8 (group rtx4090 of inventories/prod.py), the entry tier. A consumer card: no
NVLink (tensor parallelism would cross PCIe), no application clocks (gpu_clocks does nothing, and says
so), ECC off as shipped. One instance per card behind the front door; Ada runs FP8 natively."""

gpu_profile = "rtx4090_24gb"
nvidia_driver_flavour = "open"
cuda_toolkit_version = "13.0"

# Llama-3.1-8B-Instruct (bf16 checkpoint) in FP8 as it loads: 8 GB of weights on a 24 GB card, the rest
# for an fp8 KV cache (FlashInfer on Ada). source and sha256 are examples.
vllm_model = {"name": "llama-3.1-8b-instruct", "version": "2024-07-23",
              "source": "https://models.internal/llama-3.1-8b-instruct-2024-07-23.tar", "sha256": "0" * 64,
              "torch_dtype": "bfloat16", "num_attention_heads": 32}
vllm_layout = "8x1"  # eight instances of one card (ports 8001-8008), the front door on 8000
vllm_flags = {
    "dtype": "bfloat16",
    "quantization": "fp8",
    "kv-cache-dtype": "fp8",
    "tensor-parallel-size": None,  # the layout sizes each instance
    "max-model-len": 8192,
    "gpu-memory-utilization": 0.90,
    "max-num-seqs": 64,
    "scheduling-policy": "fcfs",
}
