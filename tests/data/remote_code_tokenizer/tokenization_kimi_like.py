"""A tokenizer with its own Python code, shaped like Kimi-K2.5's `tokenization_kimi.py`, for tests.

Like the real one it is a slow `PreTrainedTokenizer` loaded with `trust_remote_code`, whose own encoder turns
the text of a special token into its id wherever it occurs (tiktoken's `allowed_special="all"`), which
keeps its specials in a `special_tokens` mapping, and whose `apply_chat_template` has the real one's defaults
(`tokenize=False, add_generation_prompt=True`) and deep-sorts the tool schemas before rendering. Ordinary
text goes through the stand-in's byte-level BPE (`tokenizer.json` beside this file) instead of tiktoken,
which the test environment does not install.

Importing this module writes the file named by `KIMI_LIKE_IMPORTED` (when set): the tests use it to prove
that the code never runs without the opt-in.
"""

import json
import os
import re
from pathlib import Path

from tokenizers import Tokenizer
from transformers.tokenization_utils import PreTrainedTokenizer

if os.environ.get("KIMI_LIKE_IMPORTED"):
    Path(os.environ["KIMI_LIKE_IMPORTED"]).write_text("imported\n", encoding="utf-8")


class KimiLikeTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tokenizer.json"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, **kwargs):
        self.vocab_file = vocab_file
        raw = json.loads(Path(vocab_file).read_text(encoding="utf-8"))
        self.special_tokens = {token["content"]: token["id"] for token in raw["added_tokens"]}
        self._bpe = Tokenizer.from_file(vocab_file)
        self._bpe_vocab = self._bpe.get_vocab(with_added_tokens=False)
        self._by_id = {i: t for t, i in self._bpe_vocab.items()} | {i: t for t, i in self.special_tokens.items()}
        alternatives = sorted(self.special_tokens, key=len, reverse=True)
        self._special = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")")
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return max(self._by_id) + 1

    def get_vocab(self):
        return {t: i for i, t in self._by_id.items()}

    def encode_ids(self, text):
        """Special-token text becomes the special id anywhere, as tiktoken does with allowed_special="all"."""
        ids = []
        for piece in self._special.split(text):
            if piece in self.special_tokens:
                ids.append(self.special_tokens[piece])
            elif piece:
                ids.extend(self._bpe.encode(piece, add_special_tokens=False).ids)
        return ids

    def _tokenize(self, text, **kwargs):
        return [self._by_id[i] for i in self.encode_ids(text)]

    def _convert_token_to_id(self, token):
        return self.special_tokens.get(token, self._bpe_vocab.get(token, self.special_tokens["[UNK]"]))

    def _convert_id_to_token(self, index):
        return self._by_id.get(index)

    def convert_tokens_to_string(self, tokens):
        ids = [self._convert_token_to_id(t) for t in tokens]
        return self._bpe.decode(ids, skip_special_tokens=False)

    def apply_chat_template(self, conversation, tools=None, tokenize=False, add_generation_prompt=True, **kwargs):
        return super().apply_chat_template(
            conversation,
            tools=deep_sort_dict(tools),
            tokenize=tokenize,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )

    def save_vocabulary(self, save_directory, filename_prefix=None):
        target = Path(save_directory) / ((filename_prefix + "-" if filename_prefix else "") + "tokenizer.json")
        if Path(self.vocab_file).resolve() != target.resolve():
            target.write_bytes(Path(self.vocab_file).read_bytes())
        return (str(target),)


def deep_sort_dict(obj):
    if isinstance(obj, dict):
        return {k: deep_sort_dict(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [deep_sort_dict(item) for item in obj]
    return obj
