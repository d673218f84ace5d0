"""The tokenizer's own call, which makes every prompt id by default, and the opt-in tiktoken fast path.

Exact by construction: the pipeline's ids come from the call SGLang makes, the tokenizer's own code
(`own_call`: `tokenizer(texts, add_special_tokens=False)`, what `apply_chat_template(tokenize=True)` does). For the
Kimi tokenizer (remote code: `tokenization_kimi.TikTokenTokenizer`, a slow transformers tokenizer over tiktoken)
that is transformers' generic path: the added-token trie split, one `_tokenize` per piece (the remote code's own
`encode`, its run splitter, then tiktoken), each token string converted back to its id. Its speed comes from
worker processes (tokenize.py sizes them to the CPUs this process may use), not from replacing it.

The fast path, `encoding.encode(text, allowed_special="all")` on the tokenizer's own `tiktoken.Encoding`, does the
same work in one call, about 3x faster (docs/internals/benchmarks.md), and gives the same ids only while the
tokenizer's own
code adds nothing to plain tiktoken. Sample texts cannot prove two programs equal: a next `tokenization_kimi.py`
may normalise Unicode in `encode`, drop characters, cut runs at another length, set something on the instance,
and agree on every sample. So it is off unless the user opts in (the setting `tiktoken_fast_path`:
`--tiktoken-fast-path`, the SGLang connection's extra `"tiktoken_fast_path": true`); then, and only where these
checks at load pass (`prove`), it encodes, and the plan and manifest record `encode_path: tiktoken_fast_path`
(loader.py), so a rerun or an incremental run with the other path is refused (provenance.py):
- the added tokens the trie splits on are special tokens of the encoding, at the same ids; none has lstrip,
  rstrip, single_word or normalized set; no special token's text holds another's; split_special_tokens is off;
  and the class keeps transformers' own generic steps (it overrides none of GENERIC_STEPS);
- every ordinary id's token string converts back to that id (the generic path goes through the strings);
- the canary conversations as rendered (canaries.py), every special token's text and a few edge cases give the
  same ids both ways.
A text beyond the remote code's chunking limits (over 400,000 characters, or a run of more than 25,000
whitespace or other characters) goes through the tokenizer's own call. At run time one text in SPOT_CHECK_EVERY
is also encoded by the own call, and a difference stops the run in one line.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eagle_datagen.errors import DataGenError

log = logging.getLogger(__name__)
OWN_CALL = "own_call"  # the manifest's encode_path: the tokenizer's own call made every prompt id (the default)
FAST_PATH = "tiktoken_fast_path"  # ... the opted-in fast path did, the own call where a text was beyond its limits
MAX_ENCODE_CHARS = 400_000  # tokenization_kimi.py encodes longer texts in pieces this long
MAX_RUN_CHARS = 25_000  # ... and cuts runs of whitespace or of other characters longer than this
SPOT_CHECK_EVERY = 64  # one text in this many is encoded both ways at run time (about 3% more time)
# transformers' steps of the generic path, which the fast path reproduces; a class overriding one may differ
GENERIC_STEPS = (
    "__call__",
    "_encode_plus",
    "tokenize",
    "prepare_for_tokenization",
    "convert_tokens_to_ids",
    "_convert_token_to_id_with_added_voc",
    "prepare_for_model",
)
EDGE_TEXTS = (
    "",
    " ",
    "\n\n",
    "  two leading spaces, two trailing  ",
    "\t\r\n mixed\u00a0whitespace\u3000",
    "don't WE'LL I'M 12345678 x^2+y^2",
    "中文混合English和数字123。日本語の文",
    "emoji 😀👍🏽 and a lone surrogate \ud83d end",
)
_RUNS = re.compile(r"\s+|\S+")  # `\s` is str.isspace() for str patterns, as the remote code's splitter tests


class TokenizerPathMismatch(DataGenError):
    """The fast path and the tokenizer's own call gave different ids for one text."""


def own_call(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """The ids of `texts` as the tokenizer's own call gives them, as `apply_chat_template(tokenize=True)` would."""
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]] if texts else []


def tiktoken_encoding(tokenizer: Any) -> Any | None:
    """The one `tiktoken.Encoding` the tokenizer holds (Kimi's: `tokenizer.model`), or None."""
    encoding_type = getattr(sys.modules.get("tiktoken"), "Encoding", None)  # imported by a tokenizer that uses it
    if encoding_type is None:
        return None
    found = [value for value in vars(tokenizer).values() if isinstance(value, encoding_type)]
    return found[0] if len(found) == 1 else None


def beyond_chunking_limits(text: str) -> bool:
    """Would the remote code cut this text into pieces (so that only its own call gives its ids)?"""
    if len(text) > MAX_ENCODE_CHARS:
        return True
    return len(text) > MAX_RUN_CHARS and any(len(run) > MAX_RUN_CHARS for run in _RUNS.findall(text))


def _structural_reason(tokenizer: Any, encoding: Any) -> str | None:
    """Why the generic path may split or convert differently from the encoding, or None."""
    from transformers import PreTrainedTokenizer

    if not isinstance(tokenizer, PreTrainedTokenizer):
        return f"{type(tokenizer).__name__} is not a slow transformers tokenizer"
    cls = type(tokenizer)
    changed = [name for name in GENERIC_STEPS if getattr(cls, name) is not getattr(PreTrainedTokenizer, name)]
    if changed:
        return f"{type(tokenizer).__name__} overrides transformers' {', '.join(changed)}"
    if getattr(tokenizer, "split_special_tokens", False):
        return "split_special_tokens is on"
    specials = {text: encoding.encode_single_token(text) for text in encoding.special_tokens_set}
    for token_id, token in tokenizer.added_tokens_decoder.items():
        flags = [name for name in ("lstrip", "rstrip", "single_word", "normalized") if getattr(token, name, False)]
        if flags:
            return f"added token {token.content!r} has {', '.join(flags)} set"
        if specials.get(token.content) != token_id:
            return f"added token {token.content!r} (id {token_id}) is not the encoding's special token at that id"
    texts = sorted(specials, key=len)
    for i, short in enumerate(texts):
        inside = next((long for long in texts[i + 1 :] if short in long), None)
        if inside is not None:
            return f"special token {short!r} is part of {inside!r}"
    ordinary = [encoding.encode_single_token(piece) for piece in encoding.token_byte_values()]
    back = tokenizer.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(ordinary))
    wrong = next((i for i, j in zip(ordinary, back, strict=True) if i != j), None)
    if wrong is not None:
        return f"id {wrong}'s token string converts back to another id"
    return None


def first_mismatch(texts: Sequence[str], fast: Sequence[list[int]], own: Sequence[list[int]]) -> str | None:
    """The first text whose ids differ, described in a few words (None: all the same)."""
    for text, a, b in zip(texts, fast, own, strict=True):
        if a != b:
            at = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            return (
                f"{text[:60]!r}{'...' if len(text) > 60 else ''} ({len(text):,} chars): first difference at token "
                f"{at}: fast path {a[at] if at < len(a) else 'end'}, own call {b[at] if at < len(b) else 'end'}"
            )
    return None


def prove(tokenizer: Any, encoding: Any, rendered: Iterable[str]) -> str | None:
    """Why the fast path cannot stand in for the tokenizer's own call (None: it gives the same ids)."""
    reason = _structural_reason(tokenizer, encoding)
    if reason is not None:
        return reason
    specials = sorted(encoding.special_tokens_set)
    texts = [*rendered, *EDGE_TEXTS, *specials, *(f"a{t} b\n{t}{t}" for t in specials)]
    texts = [t for t in texts if not beyond_chunking_limits(t)]
    fast = [encoding.encode(t, allowed_special="all") for t in texts]
    mismatch = first_mismatch(texts, fast, own_call(tokenizer, texts))
    return None if mismatch is None else f"a check text gives other ids: {mismatch}"


@dataclass
class TiktokenPath:
    """Encodes texts as `own_call` does, with the encoding (see the module docstring); one per process."""

    tokenizer: Any
    encoding: Any
    where: str  # the tokenizer as the user named it
    seen: int = 0  # texts encoded so far: picks the spot-checked ones

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        encode = self.encoding.encode
        ids: list[list[int] | None] = [None] * len(texts)
        by_own_call = []
        checked = []
        for index, text in enumerate(texts):
            if beyond_chunking_limits(text):
                by_own_call.append(index)
                continue
            ids[index] = encode(text, allowed_special="all")
            if (self.seen + index) % SPOT_CHECK_EVERY == 0:
                by_own_call.append(index)
                checked.append(index)
        self.seen += len(texts)
        own = dict(zip(by_own_call, own_call(self.tokenizer, [texts[i] for i in by_own_call]), strict=True))
        mismatch = first_mismatch([texts[i] for i in checked], [ids[i] for i in checked], [own[i] for i in checked])
        if mismatch is not None:
            raise TokenizerPathMismatch(
                f"tokenizer {self.where}: the tiktoken fast path and the tokenizer's own call disagree on the prompt "
                f"{mismatch}; rerun without --tiktoken-fast-path (in Airflow, the SGLang connection's extra "
                '"tiktoken_fast_path": false), the default'
            )
        return [found if found is not None else own[i] for i, found in enumerate(ids)]


def text_encoder(tokenizer: Any, where: str, fast_path: Any | None) -> Callable[[Sequence[str]], list[list[int]]]:
    """The encoder of one process: the own call, or the opted-in fast path over `fast_path` (the proven encoding)."""
    if fast_path is None:
        return lambda texts: own_call(tokenizer, texts)
    return TiktokenPath(tokenizer, fast_path, where)
