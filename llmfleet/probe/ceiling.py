"""The memory-bandwidth ceiling of decode throughput: a calculation, not a measurement (the
roofline model of a memory-bound step).

Decode is memory-bandwidth bound: every engine step reads each weight byte once, plus the KV cache
of every sequence in the batch:

    step_time >= (weight_bytes_per_gpu + batch * avg_context * kv_bytes_per_token_per_gpu)
                 / (eta * HBM_bandwidth)                       (+ all-reduce time, not counted)

so one stream decodes at most 1/step_time(batch=1) tokens/s, and a batch of B at B/step_time(B).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "half": 2, "float32": 4, "float": 4}
ETA = 0.8  # achievable share of the HBM bandwidth (the facts file's worked example)


@dataclass
class ModelShape:
    weight_bytes: int
    layers: int
    hidden: int
    kv_heads: int
    heads: int
    dtype_bytes: int

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: 2 x layers x (hidden x kv_heads / heads) x dtype bytes."""
        return 2 * self.layers * (self.hidden * self.kv_heads // self.heads) * self.dtype_bytes


def shape_of_model_dir(path: Path, dtype: str | None = None) -> ModelShape:
    """From a Hugging Face model folder: config.json and the size of its safetensors files."""
    cfg = json.loads((path / "config.json").read_text())
    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    heads = cfg["num_attention_heads"]
    dt = dtype if dtype in DTYPE_BYTES else cfg.get("torch_dtype", "float16")
    return ModelShape(weights, cfg["num_hidden_layers"], cfg["hidden_size"],
                      cfg.get("num_key_value_heads", heads), heads, DTYPE_BYTES.get(dt, 2))


@dataclass
class Ceiling:
    bandwidth_gbs_per_gpu: float
    gpus: int  # tensor-parallel size
    eta: float
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    batch: float
    avg_context: float
    step_ms: float
    single_stream_tokens_per_s: float
    batch_tokens_per_s: float

    def as_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def ceiling(bandwidth_gbs: float, gpus: int, weight_bytes: float, kv_bytes_per_token: float,
            batch: float = 1.0, avg_context: float = 0.0, eta: float = ETA) -> Ceiling:
    bw = eta * bandwidth_gbs * 1e9
    w = weight_bytes / gpus
    kv = kv_bytes_per_token / gpus
    step = (w + batch * avg_context * kv) / bw
    return Ceiling(bandwidth_gbs, gpus, eta, w, kv, batch, avg_context, step * 1000, bw / w, batch / step)
