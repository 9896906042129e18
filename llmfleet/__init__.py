"""llmfleet: converge and verify GPU servers for serving LLMs with vLLM."""

__version__ = "0.1.0"
