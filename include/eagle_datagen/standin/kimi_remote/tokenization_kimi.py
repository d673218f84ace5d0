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

Encoding has the real file's call structure, and no shortcut of its own, so that the tests and benchmarks measure
what a user of the real folder gets: `encode(text)` without keyword arguments cuts the text into pieces of at most
400,000 characters, each with no run of whitespace or of other characters longer than 25,000 (tiktoken's Rust
regex fails on longer ones), found character by character in Python, and encodes each with every special token
allowed; with keyword arguments it is transformers' `encode`. A call (`tokenizer(texts)`) takes transformers'
generic slow path: the added-token split, one `_tokenize` per piece (which is `encode` above, mapped to token
strings) and the strings converted back to ids one by one through a dict. The pipeline's own fast path over the
`tiktoken.Encoding` this class exposes as `model` is eagle_datagen/tokenization/tiktoken_path.py.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from transformers import PreTrainedTokenizer

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
MAX_ENCODE_CHARS = 400_000  # longer texts are encoded in pieces this long
MAX_RUN_CHARS = 25_000  # the longest run of whitespace, or of other characters, one tiktoken call is given


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
    def encode(self, text: Any, allow_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        """Without keyword arguments, tiktoken on pieces of the text (special-token text becomes its id unless
        `allow_special_tokens` is False); with them, transformers' own `encode`."""
        if kwargs:
            return super().encode(text, **kwargs)
        assert isinstance(text, str)
        return self._encode_text_piece(text, allow_special_tokens)

    def _encode_text_piece(self, text: str, allow_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        for start in range(0, len(text), MAX_ENCODE_CHARS):
            for piece in self._split_long_runs(text[start : start + MAX_ENCODE_CHARS], MAX_RUN_CHARS):
                if allow_special_tokens:
                    ids += self.model.encode(piece, allowed_special="all")
                else:
                    ids += self.model.encode(piece, disallowed_special=())
        return ids

    @staticmethod
    def _split_long_runs(text: str, longest: int) -> Iterator[str]:
        """`text` in consecutive pieces, none holding a run of more than `longest` whitespace characters or of
        more than `longest` other characters (a run is cut where it gets too long, not at a word boundary)."""
        piece_start = 0
        run = 0
        in_space = text[:1].isspace()
        for index, char in enumerate(text):
            space = char.isspace()
            if space != in_space:
                in_space, run = space, 1
                continue
            run += 1
            if run > longest:
                yield text[piece_start:index]
                piece_start, run = index, 1
        yield text[piece_start:]

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self.decoder[i] for i in self.encode(text)]

    def decode(self, token_ids: Any, **kwargs: Any) -> str:
        if kwargs:
            return super().decode(token_ids, **kwargs)
        return self.model.decode([token_ids] if isinstance(token_ids, int) else list(token_ids))

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
