"""Kimi-K2.5's tokenizer as remote code over `tiktoken`: eagle-datagen's stand-in, written for this project.

Written from the documented behaviour of the real `tokenization_kimi.py` (not a copy of it), with the same shape:
- `TikTokenTokenizer(PreTrainedTokenizer)`, a slow transformers tokenizer whose BPE is `tiktoken`'s, over the
  ranks in `tiktoken.model` (one `base64(token bytes) rank` per line, read with `load_tiktoken_bpe`, no network);
- 256 + 2 special and reserved ids from 163,584 (163,842 ids in all), named from `added_tokens_decoder` in
  tokenizer_config.json, the unnamed ones `<|reserved_token_<id>|>`;
- Kimi's Han-aware split pattern; `encode()` without keyword arguments allows all special tokens;
- `apply_chat_template` defaults to `tokenize=False, add_generation_prompt=True`, deep-sorts the keys of every
  tool schema and hands the template the tools rendered as TypeScript (`tools_ts_str`).
Token strings use GPT-2's byte-to-character map, so " 2" is "Ġ2" and `assistant` is "assistant".

Speed: a plain call (`tokenizer(texts)`, `encode(text)`: no pairs, padding, truncation or tensors) goes straight to
tiktoken, text by text in one call of ours, special tokens included, instead of the generic slow path (added-token
trie, one `_tokenize` per piece, ids converted one by one). Both give the same ids (the project's tests compare them).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from transformers import PreTrainedTokenizer
from transformers.tokenization_utils_base import BatchEncoding

from .tool_declaration_ts import encode_tools_to_typescript_style

VOCAB_FILES_NAMES = {"vocab_file": "tiktoken.model"}
NUM_BASE_TOKENS = 163584  # the real file's BPE ranks; the special ids start here
NUM_RESERVED_SPECIAL_TOKENS = 256
PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# Keyword arguments of `_encode_plus` under which a plain call may take the batched path, with their neutral values.
_NEUTRAL = {
    "add_special_tokens": None,  # adds nothing either way (build_inputs_with_special_tokens)
    "padding_strategy": None,
    "truncation_strategy": None,
    "max_length": None,
    "stride": 0,
    "is_split_into_words": False,
    "pad_to_multiple_of": None,
    "padding_side": None,
    "return_tensors": None,
    "return_token_type_ids": None,
    "return_attention_mask": None,
    "return_overflowing_tokens": False,
    "return_special_tokens_mask": False,
    "return_length": False,
    "return_offsets_mapping": False,
    "verbose": True,
    "split_special_tokens": False,
}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = list(printable)
    shift = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + shift)
            shift += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def deep_sort(value: Any) -> Any:
    """Dict keys sorted at every depth; list order kept."""
    if isinstance(value, dict):
        return {key: deep_sort(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [deep_sort(item) for item in value]
    return value


def _content(token: Any) -> str:
    return token.content if hasattr(token, "content") else token["content"] if isinstance(token, dict) else str(token)


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(
        self,
        vocab_file: str,
        bos_token: str = "[BOS]",
        eos_token: str = "[EOS]",
        unk_token: str = "[UNK]",
        pad_token: str = "[PAD]",
        added_tokens_decoder: dict[int, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.vocab_file = vocab_file
        mergeable_ranks = load_tiktoken_bpe(vocab_file)
        names = {int(i): _content(token) for i, token in (added_tokens_decoder or {}).items()}
        special_ids = range(NUM_BASE_TOKENS, NUM_BASE_TOKENS + NUM_RESERVED_SPECIAL_TOKENS + 2)
        self.special_tokens = {names.get(i, f"<|reserved_token_{i}|>"): i for i in special_ids}
        self.model = tiktoken.Encoding(
            name=os.path.basename(vocab_file),
            pat_str=PAT_STR,
            mergeable_ranks=mergeable_ranks,
            special_tokens=self.special_tokens,
        )
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {char: b for b, char in self.byte_encoder.items()}
        self.decoder = {rank: "".join(self.byte_encoder[b] for b in token) for token, rank in mergeable_ranks.items()}
        self.decoder.update({i: name for name, i in self.special_tokens.items()})
        self.encoder = {token: i for i, token in self.decoder.items()}
        self.n_words = NUM_BASE_TOKENS + NUM_RESERVED_SPECIAL_TOKENS + 2
        kwargs.setdefault("special_tokens_pattern", "none")
        # The added tokens marked special (turn markers, media, reserved) are skipped when decoding with
        # skip_special_tokens; think and tool-call tokens are not special and stay.
        named = {str(bos_token), str(eos_token), str(unk_token), str(pad_token)}
        special = [
            _content(token)
            for token in (added_tokens_decoder or {}).values()
            if getattr(token, "special", False) and _content(token) not in named
        ]
        kwargs["extra_special_tokens"] = special
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            added_tokens_decoder=added_tokens_decoder or {},
            **kwargs,
        )

    # --- vocabulary -------------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.n_words

    def get_vocab(self) -> dict[str, int]:
        return dict(self.encoder)

    def _convert_token_to_id(self, token: str) -> int:
        return self.encoder.get(token, self.special_tokens.get(str(self.unk_token), 0))

    def _convert_id_to_token(self, index: int) -> str:
        return self.decoder.get(index, str(self.unk_token))

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        data = bytearray()
        for token in tokens:
            if token in self.special_tokens:
                data += token.encode("utf-8")
            else:
                data += bytes(self.byte_decoder[char] for char in token)
        return data.decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        target = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "tiktoken.model")
        if os.path.abspath(self.vocab_file) != os.path.abspath(target):
            shutil.copyfile(self.vocab_file, target)
        return (target,)

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        return list(token_ids_0) + list(token_ids_1 or [])

    # --- encoding ---------------------------------------------------------------------------------------------
    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        """The generic slow path: added tokens are already split off, so the text is ordinary."""
        return [self.decoder[i] for i in self.model.encode_ordinary(text)]

    def encode(self, text: Any, *args: Any, **kwargs: Any) -> list[int]:
        if isinstance(text, str) and not args and not kwargs:
            return self.model.encode(text, allowed_special="all", disallowed_special=())
        return super().encode(text, *args, **kwargs)

    def _plain_call(self, text: Any, text_pair: Any, kwargs: dict[str, Any]) -> bool:
        if text_pair is not None or not (
            isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text))
        ):
            return False
        if set(kwargs) - set(_NEUTRAL) or self.split_special_tokens:
            return False
        for key, value in kwargs.items():
            neutral = _NEUTRAL[key]
            if key == "add_special_tokens" or key == "return_attention_mask" or value == neutral:
                continue
            if key in ("padding_strategy", "truncation_strategy") and getattr(value, "value", value) in (
                "do_not_pad",
                "do_not_truncate",
                False,
            ):
                continue
            if key == "split_special_tokens" and not value:
                continue
            if key == "verbose":
                continue
            return False
        return True

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> BatchEncoding:
        if not self._plain_call(text, text_pair, kwargs):
            return super()._encode_plus(text, text_pair, **kwargs)
        mask = kwargs.get("return_attention_mask")
        with_mask = mask if mask is not None else "attention_mask" in self.model_input_names
        if isinstance(text, str):
            ids = self.model.encode(text, allowed_special="all", disallowed_special=())
            data: dict[str, Any] = {"input_ids": ids}
            if with_mask:
                data["attention_mask"] = [1] * len(ids)
            return BatchEncoding(data)
        # One tiktoken call per text: its encode_batch hands the texts to a thread pool, slower on few cores.
        encode = self.model.encode
        batch = [encode(t, allowed_special="all", disallowed_special=()) for t in text]
        data = {"input_ids": batch}
        if with_mask:
            data["attention_mask"] = [[1] * len(ids) for ids in batch]
        return BatchEncoding(data)

    # --- chat template ----------------------------------------------------------------------------------------
    def apply_chat_template(
        self,
        conversation: Any,
        tools: list[dict[str, Any]] | None = None,
        tokenize: bool = False,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> Any:
        tools = deep_sort(tools) if tools else tools
        tools_ts_str = encode_tools_to_typescript_style(tools) if tools else ""
        kwargs.setdefault("tools_ts_str", tools_ts_str)
        return super().apply_chat_template(
            conversation, tools=tools, tokenize=tokenize, add_generation_prompt=add_generation_prompt, **kwargs
        )
