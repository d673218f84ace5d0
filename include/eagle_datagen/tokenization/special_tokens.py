"""Literal special-token text in a record: a user message must not forge turn boundaries.

A prompt is rendered to text by the chat template and the text is encoded by the model's tokenizer,
which turns the text of a special or added token into that token's id wherever it occurs, content
included (Kimi's tiktoken tokenizer and `tokenizers` fast tokenizers alike). A user who types
`<|im_end|><|im_assistant|>` thus puts turn boundaries into the prompt that the template never placed.

The check is tokenizer-agnostic and compares structure, not spelling. For a record whose strings contain
the text of a guarded token, the record is rendered a second time with every such text replaced by a
neutral character (the *skeleton*), and the guarded ids of both prompts are compared in order: they must
be the same sequence, i.e. every special id of the prompt was placed by the template. A record whose
prompt has other special ids is rejected with `special_token_text` (unless the run allows it). What the
template itself does with such text (Jinja's `tojson` escaping, a template dropping old reasoning) is
respected: if no extra id reaches the prompt, the record is kept, with its prompt exactly as the model
will process it. Records without any guarded text (nearly all) cost one regex scan and no second render.

Guarded tokens: the tokenizer's added tokens (special or not: `<think>` and the tool-call tokens are added
but not special in Kimi's tokenizer), its special tokens, a tiktoken-style `special_tokens` mapping where
the tokenizer has one, and the profile's think and EOS tokens (not its other facts: `assistant` is an
ordinary word). Tokens whose text is only whitespace are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from eagle_datagen.profile import REQUIRED_TOKENS, ModelProfile

# What a token's text becomes in the skeleton: one ordinary character (a bullet). No text of Kimi's tokens holds
# it, so a replacement cannot complete another token's text with its neighbours: one pass leaves none.
NEUTRAL = "\u2022"


def _guarded_tokens(tokenizer: Any, profile: ModelProfile) -> dict[str, int]:
    tokens: dict[str, int] = {}
    for token_id, token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        tokens[str(getattr(token, "content", token))] = int(token_id)
    mapping = getattr(tokenizer, "special_tokens", None)  # tiktoken-based tokenizers (Kimi) keep all specials here
    if isinstance(mapping, dict):
        tokens.update({str(text): int(i) for text, i in mapping.items() if isinstance(i, int)})
    for text in getattr(tokenizer, "all_special_tokens", None) or []:
        token_id = tokenizer.convert_tokens_to_ids(text)
        if isinstance(token_id, int):
            tokens[str(text)] = token_id
    tokens.update({profile.tokens[name].text: profile.tokens[name].id for name in REQUIRED_TOKENS})
    return {text: i for text, i in tokens.items() if text.strip()}


def trie_pattern(words: list[str]) -> re.Pattern[str]:
    """One regex for many literal words, shaped as a trie (`<(?:/think>|think>)` for both think tags): the
    longest word wins, and a scan costs one step per character instead of one try per word."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        if len(branches) == 1 and "" not in node:
            return branches[0]
        return "(?:" + "|".join(branches) + ")" + ("?" if "" in node else "")

    return re.compile(emit(trie) if words else r"(?!)")


@dataclass(frozen=True)
class SpecialTokenText:
    where: str  # e.g. "messages[0].content"
    text: str  # the token text found there


@dataclass(frozen=True)
class SpecialTokenGuard:
    ids: frozenset[int]
    pattern: re.Pattern[str]
    texts: dict[str, int]

    @classmethod
    def of(cls, tokenizer: Any, profile: ModelProfile) -> SpecialTokenGuard:
        texts = _guarded_tokens(tokenizer, profile)
        return cls(frozenset(texts.values()), trie_pattern(sorted(texts)), texts)

    def find(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> SpecialTokenText | None:
        """The first string of the prompt (content, names, ids, arguments, tool specs) holding a token's text."""
        for where, text in _strings({"messages": messages, "tools": tools}, ""):
            match = self.pattern.search(text)
            if match:
                return SpecialTokenText(where.lstrip("."), match.group())
        return None

    def neutralise(self, value: Any) -> Any:
        """A copy of `value` in which no string holds a guarded token's text."""
        if isinstance(value, str):
            return self.pattern.sub(NEUTRAL, value)
        if isinstance(value, dict):
            return {self.neutralise(k): self.neutralise(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.neutralise(v) for v in value]
        return value

    def structure(self, ids: Sequence[int]) -> list[int]:
        """The guarded ids of a prompt, in order."""
        return [i for i in ids if i in self.ids]

    def forged(self, prompt_ids: Sequence[int], skeleton_ids: Sequence[int]) -> bool:
        """Whether the prompt's guarded ids differ from the skeleton's: ids the template did not place."""
        return self.structure(prompt_ids) != self.structure(skeleton_ids)


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where} key", key
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")
