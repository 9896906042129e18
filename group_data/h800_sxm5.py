"""HGX H800 8-GPU (group h800_sxm5 of inventories/prod.py), a private deployment. Advice that is wrong
on a V100 holds on this GPU: FP8 quantization (Hopper's FP8 tensor cores) and tensor parallelism
inside one machine over NVLink (8 links a GPU on H800, 400 GB/s, through four NVSwitches; Fabric
Manager comes with the driver). The same flags on a V100 group are refused, with the reason."""

gpu_profile = "h800_sxm5_80gb_x8"
nvidia_driver_flavour = "open"
cuda_toolkit_version = "13.0"

# source and sha256 are examples
vllm_model = {"name": "llama-3.1-70b-instruct", "version": "2024-07-23",
              "source": "https://models.internal/llama-3.1-70b-instruct-2024-07-23.tar", "sha256": "0" * 64,
              "torch_dtype": "bfloat16", "num_attention_heads": 64}
vllm_flags = {
    "dtype": "bfloat16",
    "quantization": "fp8",  # native W8A8 from compute capability 8.9
    "kv-cache-dtype": "fp8",  # on FlashAttention 3 (SM90)
    "tensor-parallel-size": 8,  # inside the machine, over NVLink: never across machines
    "max-model-len": 16384,
    "gpu-memory-utilization": 0.90,
    "max-num-seqs": 256,
    "scheduling-policy": "fcfs",
}
