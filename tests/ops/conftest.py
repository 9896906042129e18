"""Shared fixtures of the operation tests."""

from pathlib import Path

import pytest

from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import validate

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"name": "tiny", "version": "2", "source": "https://models.internal/t.tar", "sha256": "a" * 64,
         "torch_dtype": "bfloat16", "num_attention_heads": 32}


@pytest.fixture(scope="module")
def settings():
    """group_data/all.py's defaults with a model: a V100 host as the fleet's defaults describe it."""
    d = schema_defaults()
    return validate("gpu-1", {k: v for k, v in d.items() if not k.startswith("__")} | {"vllm_model": MODEL})
