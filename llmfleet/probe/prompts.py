"""Prompts of a requested token length, each one different.

With the served model's tokenizer (``tokenizer.json``) a prompt is random vocabulary tokens,
decoded to text and re-encoded until it is exactly the asked length. Without it, words are used
and their tokens-per-word ratio is calibrated once with the server's ``/tokenize`` (vLLM has it);
failing that the count is approximate. The method is recorded in the report, and the report
compares asked lengths with the server's own ``usage.prompt_tokens``.

Every prompt starts differently (random tokens from the first position), so the server's prefix
cache cannot share work between requests and flatter the results (benchmarking.md pitfall 7).
"""

from __future__ import annotations

import random
from pathlib import Path

from llmfleet.probe.config import ProbeError

_WORDS = ("time year people way day man thing woman life child world school state family student group "
          "country problem hand part place case week company system program question work government "
          "number night point home water room mother area money story fact month lot right study book eye "
          "job word business issue side kind head house service friend father power hour game line end "
          "member law car city community name president team minute idea kid body information back parent "
          "face others level office door health person art war history party result change morning reason "
          "research girl guy moment air teacher force education").split()


def load_tokenizer(path: str | Path):
    """A `tokenizers.Tokenizer` from tokenizer.json or a model folder holding it."""
    from tokenizers import Tokenizer

    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise ProbeError(f"--tokenizer {path}: no tokenizer.json there (fix: the served model's folder or its "
                         "tokenizer.json, or leave --tokenizer out to calibrate with the server)")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises its own Exception type
        raise ProbeError(f"--tokenizer {file}: not a tokenizer.json the tokenizers library can read ({exc})") from exc


class PromptMaker:
    """Makes prompts; ``method`` says how their lengths were obtained."""

    def __init__(self, tokenizer=None, tokens_per_word: float | None = None, seed: int = 0):
        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        if tokenizer is not None:
            special = {t.content for t in tokenizer.get_added_tokens_decoder().values()} \
                if hasattr(tokenizer, "get_added_tokens_decoder") else set()
            vocab = tokenizer.get_vocab()
            self.ids = sorted(i for tok, i in vocab.items() if tok not in special)
            self.method = "tokenizer"
        elif tokens_per_word:
            self.tokens_per_word = tokens_per_word
            self.method = "words, calibrated with the server's /tokenize"
        else:
            self.tokens_per_word = 1.3
            self.method = "words, approximate (1.3 tokens per word)"

    def make(self, n_tokens: int) -> str:
        if self.tokenizer is None:
            words = max(1, round(n_tokens / self.tokens_per_word))
            return " ".join(self.rng.choice(_WORDS) for _ in range(words))
        ids = [self.rng.choice(self.ids) for _ in range(n_tokens)]
        text = self.tokenizer.decode(ids)
        for _ in range(12):
            enc = self.tokenizer.encode(text).ids
            if len(enc) == n_tokens:
                return text
            if len(enc) > n_tokens:
                ids = enc[:n_tokens]
            else:
                ids = enc + [self.rng.choice(self.ids) for _ in range(n_tokens - len(enc))]
            text = self.tokenizer.decode(ids)
        return text  # within a token or two; the report compares with the server's count

    def count(self, text: str) -> int | None:
        return len(self.tokenizer.encode(text).ids) if self.tokenizer is not None else None

