"""Prompts of a requested token length, each one different.

With the served model's tokenizer (``tokenizer.json``) a prompt is random vocabulary tokens,
decoded to text and re-encoded until it is exactly the asked length. Without it, words are used
and their tokens-per-word ratio is calibrated once with the server's ``/tokenize`` (vLLM has it);
failing that the count is approximate. The method is recorded in the report, and the report
compares asked lengths with the server's own ``usage.prompt_tokens``.

Every prompt starts differently (random tokens from the first position), so the server's prefix
cache cannot share work between requests and flatter the results (benchmarking.md pitfall 7),
unless the user asks for sharing: a class's ``shared_prefix_tokens`` (a system prompt the same for
every request of the class), or a trace's hash ids (``block``: the same id, the same text).
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
        self.seed = seed
        self._kept: dict[tuple[str, int], list] = {}

    def make(self, n_tokens: int, prefix: tuple[str, int] | None = None) -> str:
        """A prompt of ``n_tokens``, different from every other; ``prefix`` (key, tokens): its first tokens
        are the key's own, the same in every prompt made with that key."""
        head = self._keyed(f"prefix/{prefix[0]}", prefix[1]) if prefix else []
        return self._exact(head + self._random(n_tokens - len(head), self.rng), n_tokens)

    def blocks(self, keys: list, n_tokens: int, size: int) -> str:
        """A prompt of ``n_tokens`` made of blocks of ``size`` tokens, one per key (the last one cut short):
        the same key, the same tokens, so prompts with the same leading keys share that prefix (a
        trace's hash ids)."""
        units = []
        for k, key in enumerate(keys):
            block = self._keyed(f"block/{key}", size)
            units += block[:max(0, n_tokens - k * size)] if self.tokenizer else \
                block[:max(0, round((n_tokens - k * size) / self.tokens_per_word))]
        return self._exact(units, n_tokens)

    def _keyed(self, key: str, n_tokens: int) -> list:
        """The units of ``key`` (the same every time: seeded by it, and kept)."""
        if (key, n_tokens) not in self._kept:
            self._kept[(key, n_tokens)] = self._stable(n_tokens, random.Random(f"{self.seed}/{key}"))
        return self._kept[(key, n_tokens)]

    def _stable(self, n_tokens: int, rng: random.Random) -> list:
        """Units of about ``n_tokens`` that read back as themselves: with a tokenizer, the encoding of a
        text of exactly that length (random ids decode to text that encodes to other, more ids)."""
        units = self._random(n_tokens, rng)
        if self.tokenizer is None:
            return units
        return self.tokenizer.encode(self._exact(units, n_tokens, rng)).ids

    def _random(self, n_tokens: int, rng: random.Random) -> list:
        """Random vocabulary ids (with a tokenizer) or words for about ``n_tokens`` tokens."""
        if self.tokenizer is None:
            return [rng.choice(_WORDS) for _ in range(max(0, round(n_tokens / self.tokens_per_word)))]
        return [rng.choice(self.ids) for _ in range(max(0, n_tokens))]

    def _exact(self, units: list, n_tokens: int, rng: random.Random | None = None) -> str:
        """Text of exactly ``n_tokens`` from the ids (or words) ``units``: decoded, encoded again, and cut or
        filled at its end until the length holds (the start stays as it was)."""
        if self.tokenizer is None:
            return " ".join(units or [self.rng.choice(_WORDS)])
        ids = list(units)
        text = self.tokenizer.decode(ids)
        for _ in range(12):
            enc = self.tokenizer.encode(text).ids
            if len(enc) == n_tokens:
                return text
            if len(enc) > n_tokens:
                ids = enc[:n_tokens]
            else:
                ids = enc + self._random(n_tokens - len(enc), rng or self.rng)
            text = self.tokenizer.decode(ids)
        return text  # within a token or two; the report compares with the server's count

    def count(self, text: str) -> int | None:
        return len(self.tokenizer.encode(text).ids) if self.tokenizer is not None else None

