"""8 x V100 SXM2 32GB (group v100_sxm2 of inventories/prod.py): the fleet defaults of
group_data/all.py are this machine's (profile v100_sxm2_32gb_x8, proprietary driver 580.95.05,
CUDA 12.9, vLLM 0.19.1, fp16, tensor parallelism 8); here only the model it serves.
"""

# Llama-2-13B chat, fp16 (config.json: torch_dtype float16, 40 attention heads; the README's 13B
# arithmetic). source and sha256 are examples: your model store's archive and its sha256sum (a wrong
# checksum stops the switch to the new model on the host).
vllm_model = {"name": "llama-2-13b-chat", "version": "2023-07-18",
              "source": "https://models.internal/llama-2-13b-chat-2023-07-18.tar", "sha256": "0" * 64,
              "torch_dtype": "float16", "num_attention_heads": 40}
