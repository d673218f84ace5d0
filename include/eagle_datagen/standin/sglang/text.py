"""Optional text for /generate: decode (and encode) with a real tokenizer when the server is given one.

Without a tokenizer there is no `text` (as with SGLang's --skip-tokenizer-init) and only `input_ids` are
accepted: the pipeline never reads text, and
loading transformers would slow every test that starts a server.
"""

from __future__ import annotations

from typing import Any


class TextCodec:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def ordinary_ids(self, below: int) -> list[int]:
        """The ids this tokenizer has below the first special id."""
        return sorted(i for i in self.tokenizer.get_vocab().values() if i < below)


def load_codec(tokenizer_path: str | None) -> TextCodec | None:
    """The tokenizer at `tokenizer_path` (`standin:kimi-k2.5`: the project's stand-in), or None without one."""
    if not tokenizer_path:
        return None
    from transformers import AutoTokenizer

    if tokenizer_path.startswith("standin:"):
        from eagle_datagen.tokenization.loader import resolve_tokenizer_path

        tokenizer_path = resolve_tokenizer_path(tokenizer_path)
    # As SGLang serving Kimi-K2.5 with --trust-remote-code (server_info says so): the folder's own code.
    return TextCodec(AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=True))
