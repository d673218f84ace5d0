"""Build a stand-in for the Kimi-K2.5 tokenizer with the `tokenizers` library.

The real tokenizer cannot be downloaded here (model hubs are unreachable), so tests, the demo and the
benchmarks use this one. It keeps every fact the pipeline relies on:
- the 256 byte-level tokens at ids 0-255 in GPT-2 byte order (so " 2+2?" is 220, 17, 10, 17, 30);
- Kimi's pre-tokenizer split pattern and a small byte-level BPE learned from `corpus.txt`;
- the plain word `assistant` at id 69702;
- the 256 + 2 = 258 special and reserved ids at their real positions (163584-163841), named as
  `tokenization_kimi.py` names them (the known ones by name, the rest `<|reserved_token_<id>|>`), think and
  tool-call tokens as added but not "special" tokens, as in the real tokenizer. Like the real one it thus has
  163,842 ids for a model whose vocab_size is 163,840: ids 163840 and 163841 exist only in the tokenizer;
- a K2.5-style chat template (`kimi_k25_chat_template.jinja`) whose generation prompt ends in `<think>`, and
  which declares the tools with their keys sorted at every depth, as the real `apply_chat_template` does
  (it deep-sorts the tool schemas before rendering).
Ids between the learned BPE tokens and 163584 are left unused, as a smaller vocabulary would.

What is not faithful (the stand-in is a plain `tokenizer.json` + `tokenizer_config.json`, loadable without
remote code): the real tokenizer is tiktoken-based remote code whose `apply_chat_template` defaults to
`tokenize=False, add_generation_prompt=True` and hands the template a TypeScript-style rendering of the tools
(`tools_ts_str`); the stand-in has transformers' defaults (`tokenize=True, add_generation_prompt=False`) and
declares tools as compact JSON. The pipeline passes both arguments on every call, so either default gives the
same prompt (tests/tokenization/test_template_defaults.py). Its BPE is not Kimi's either.

The build is deterministic and cached under a folder keyed by a fingerprint of its inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# Bump when the builder changes in a way that changes its output.
BUILD_VERSION = "2"  # 2: 258 special ids up to 163841, real reserved names, deep-sorted tools
STANDIN_NAME = "kimi-k2.5"

BPE_RANKS = 163584  # the real tokenizer's tiktoken ranks; special ids start here
RESERVED_SPECIAL_IDS = 256 + 2  # tokenization_kimi.py: num_reserved_special_tokens + 2
TOKENIZER_SIZE = BPE_RANKS + RESERVED_SPECIAL_IDS  # 163842 ids in the tokenizer
MODEL_VOCAB_SIZE = 163840  # rows of the model's embedding: the last two tokenizer ids are beyond it
ASSISTANT_ID = 69702
LEARNED_VOCAB_TARGET = 6000

# tiktoken pattern of tokenization_kimi.py; `&&` class intersection is supported by Oniguruma.
KIMI_SPLIT_PATTERN = "|".join(
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

# id -> (token text, special). "special" tokens are skipped when decoding; think and tool-call tokens
# are added tokens but not special in the real tokenizer.
NAMED_TOKENS: dict[int, tuple[str, bool]] = {
    163584: ("[BOS]", True),
    163585: ("[EOS]", True),
    163586: ("<|im_end|>", True),
    163587: ("<|im_user|>", True),
    163588: ("<|im_assistant|>", True),
    163590: ("<|start_header_id|>", True),
    163591: ("<|end_header_id|>", True),
    163593: ("[EOT]", True),
    163594: ("<|im_system|>", True),
    163595: ("<|tool_calls_section_begin|>", False),
    163596: ("<|tool_calls_section_end|>", False),
    163597: ("<|tool_call_begin|>", False),
    163598: ("<|tool_call_argument_begin|>", False),
    163599: ("<|tool_call_end|>", False),
    163601: ("<|im_middle|>", True),
    163602: ("<|media_begin|>", True),
    163603: ("<|media_content|>", True),
    163604: ("<|media_end|>", True),
    163605: ("<|media_pad|>", True),
    163606: ("<think>", False),
    163607: ("</think>", False),
    163838: ("[UNK]", True),
    163839: ("[PAD]", True),
}


def gpt2_byte_order() -> list[int]:
    """Byte values in the order GPT-2 numbers its 256 byte tokens: printable bytes first, then the rest."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    return printable + [b for b in range(256) if b not in set(printable)]


def gpt2_byte_to_char() -> dict[int, str]:
    """GPT-2's reversible byte -> character map: printable bytes stand for themselves, the rest shift to 256+."""
    order = gpt2_byte_order()
    printable_count = 188
    return {b: chr(b) if i < printable_count else chr(256 + i - printable_count) for i, b in enumerate(order)}


def special_token_table() -> list[tuple[int, str, bool]]:
    """All 258 ids from 163584 up, with names for the known ones and, as tokenization_kimi.py names them,
    `<|reserved_token_<id>|>` for the rest."""
    table = []
    for token_id in range(BPE_RANKS, TOKENIZER_SIZE):
        text, special = NAMED_TOKENS.get(token_id, (f"<|reserved_token_{token_id}|>", True))
        table.append((token_id, text, special))
    return table


def byte_level_pre_tokenizer(pattern: str = KIMI_SPLIT_PATTERN) -> pre_tokenizers.PreTokenizer:
    """A tiktoken-style pre-tokenizer: split by `pattern`, then map bytes to GPT-2's byte characters."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _read_resource(name: str) -> str:
    return resources.files("eagle_datagen.standin").joinpath(name).read_text(encoding="utf-8")


def _learn_merges(corpus: str) -> list[tuple[str, str]]:
    """Learn BPE merges (in rank order) from the corpus with the tokenizers trainer."""
    scratch = Tokenizer(models.BPE())
    scratch.pre_tokenizer = byte_level_pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=LEARNED_VOCAB_TARGET,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    scratch.train_from_iterator(corpus.split("\n\n"), trainer=trainer)
    merges = json.loads(scratch.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def _ensure_single_token(word: str, merges: list[tuple[str, str]]) -> None:
    """Append merges so that `word` (already byte-level) becomes one token, whatever was learned."""
    pieces = list(word)
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    while True:  # replay the learned merges on the word, lowest rank first
        candidates = [(ranks[p], i) for i, p in enumerate(zip(pieces, pieces[1:], strict=False)) if p in ranks]
        if not candidates:
            break
        _, i = min(candidates)
        pieces[i : i + 2] = [pieces[i] + pieces[i + 1]]
    while len(pieces) > 1:
        merges.append((pieces[0], pieces[1]))
        pieces[0:2] = [pieces[0] + pieces[1]]


def build_tokenizer_object(corpus: str) -> Tokenizer:
    """The stand-in as a `tokenizers.Tokenizer` with ids at the real Kimi positions."""
    byte_char = gpt2_byte_to_char()
    vocab: dict[str, int] = {byte_char[b]: i for i, b in enumerate(gpt2_byte_order())}

    merges = _learn_merges(corpus)
    _ensure_single_token("assistant", merges)
    next_id = 256
    for left, right in merges:
        token = left + right
        if token in vocab:
            continue
        if token == "assistant":
            vocab[token] = ASSISTANT_ID
            continue
        if next_id == ASSISTANT_ID:
            next_id += 1
        vocab[token] = next_id
        next_id += 1
    if next_id >= ASSISTANT_ID:
        raise RuntimeError("learned vocabulary reached the id reserved for 'assistant'; lower the target")

    for token_id, text, _ in special_token_table():
        vocab[text] = token_id

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = byte_level_pre_tokenizer()
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [AddedToken(text, special=True, normalized=False) for _, text, special in special_token_table() if special]
    )
    tokenizer.add_tokens(
        [AddedToken(text, special=False, normalized=False) for _, text, special in special_token_table() if not special]
    )
    return tokenizer


def build_standin_kimi_tokenizer(output_dir: str | Path) -> Path:
    """Write a transformers-loadable tokenizer directory (tokenizer.json, config, chat template)."""
    from transformers import PreTrainedTokenizerFast

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer_object(_read_resource("corpus.txt")),
        bos_token="[BOS]",
        eos_token="[EOS]",
        unk_token="[UNK]",
        pad_token="[PAD]",
        chat_template=_read_resource("kimi_k25_chat_template.jinja"),
        model_max_length=262144,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(str(output_dir))
    (output_dir / "STANDIN.md").write_text(
        "Stand-in for the Kimi-K2.5 tokenizer built by eagle-datagen (eagle_datagen.standin). "
        "Not the real tokenizer: special ids (258, up to 163841) and the chat template shape match, the BPE "
        "and the tool declaration format (JSON, not TypeScript) do not.\n",
        encoding="utf-8",
    )
    return output_dir


def build_fingerprint() -> str:
    digest = hashlib.sha256(BUILD_VERSION.encode())
    for name in ("corpus.txt", "kimi_k25_chat_template.jinja"):
        digest.update(_read_resource(name).encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def default_cache_root() -> Path:
    return Path(os.environ.get("EAGLE_DATAGEN_CACHE", Path.home() / ".cache" / "eagle-datagen"))


@cache
def standin_tokenizer_dir(cache_root: str | None = None) -> Path:
    """Path of the cached stand-in, building it first (atomically, safe for parallel callers)."""
    root = Path(cache_root) if cache_root else default_cache_root()
    target = root / f"standin-{STANDIN_NAME}-{build_fingerprint()}"
    if (target / "tokenizer.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        build_standin_kimi_tokenizer(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its build is identical
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
