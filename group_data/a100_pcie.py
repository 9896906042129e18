"""A100 80GB PCIe x 8 without NVLink bridges (group a100_pcie of inventories/prod.py). Every pair
talks over PCIe: tensor parallelism stays small, two GPUs an instance, four instances behind the front
door. (Cards joined by NVLink bridges: gpu_profile = "a100_pcie_80gb_nvlink".)"""

gpu_profile = "a100_pcie_80gb"
nvidia_driver_flavour = "open"
cuda_toolkit_version = "13.0"

# Qwen2.5-32B-Instruct as an AWQ checkpoint (config.json quantization_config.quant_method "awq": vLLM
# runs it with its Marlin kernels from compute capability 7.5; 40 attention heads, so TP 2 divides
# them). source and sha256 are examples.
vllm_model = {"name": "qwen2.5-32b-instruct-awq", "version": "2024-09-19",
              "source": "https://models.internal/qwen2.5-32b-instruct-awq-2024-09-19.tar", "sha256": "0" * 64,
              "torch_dtype": "float16", "num_attention_heads": 40, "quantization": "awq"}
vllm_layout = "4x2"  # four instances of two GPUs (ports 8001-8004), the front door on 8000
vllm_flags = {
    "dtype": "half",
    "tensor-parallel-size": None,  # the layout sizes each instance
    "max-model-len": 8192,
    "gpu-memory-utilization": 0.90,
    "max-num-seqs": 256,
    "scheduling-policy": "fcfs",
}
