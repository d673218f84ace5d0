"""Build the stand-ins for the Kimi-K2.5 tokenizer.

The real tokenizer cannot be downloaded here (model hubs are unreachable), so tests, the demo and the
benchmarks use one the project builds. `standin:kimi-k2.5` has the real folder's shape: remote code over
`tiktoken`, loaded only with `--trust-remote-code`, exactly as a user loads the real `moonshotai/Kimi-K2.5`:
- `tiktoken.model` (BPE ranks, one `base64(bytes) rank` per line), `tokenization_kimi.py` defining
  `TikTokenTokenizer(PreTrainedTokenizer)` with its relatively imported TypeScript tool encoder
  (`tool_declaration_ts.py`; both written for this project from the documented behaviour, in
  `eagle_datagen/standin/kimi_remote/`), `tokenizer_config.json` whose `auto_map` points `AutoTokenizer` at
  that class, `chat_template.jinja` (tools declared from `tools_ts_str`) and `config.json` with
  `model_type: kimi_k25` (for which transformers 5.x has a built-in class: the loader refuses that fall-back);
- the 256 byte-level tokens at ranks 0-255 in GPT-2 byte order (so " 2+2?" is 220, 17, 10, 17, 30);
- Kimi's pre-tokenizer split pattern and a small BPE learned from `corpus.txt`; the plain word `assistant` at
  rank 69702;
- the 256 + 2 = 258 special and reserved ids at their real positions (163584-163841), named as the real
  tokenizer names them (the known ones by name, the rest `<|reserved_token_<id>|>`), think and tool-call
  tokens as added but not "special" tokens. Like the real one it thus has 163,842 ids for a model whose
  vocab_size is 163,840: ids 163840 and 163841 exist only in the tokenizer;
- a K2.5-style chat template (`kimi_k25_chat_template.jinja`) whose generation prompt ends in `<think>`;
  `apply_chat_template` defaults to `tokenize=False, add_generation_prompt=True` and deep-sorts tool schemas.

`standin:kimi-k2.5-fast` is the same vocabulary as a plain fast `tokenizer.json` (no remote code) for tests
that need one: its merges are derived from the tiktoken ranks, so both give the same ids for any text; only
tool declarations differ (compact JSON there, as transformers' built-in class would render them).
Ids between the learned BPE tokens and 163584 are left unused, as a smaller vocabulary would.

The builds are deterministic and cached under folders keyed by a fingerprint of their inputs.
"""

from __future__ import annotations

import base64
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
BUILD_VERSION = "3"  # 3: tiktoken ranks, remote-code variant; 2: 258 special ids, real reserved names
STANDIN_NAME = "kimi-k2.5"  # the remote-code stand-in (needs trust_remote_code)
FAST_STANDIN_NAME = "kimi-k2.5-fast"  # the same ids as a fast tokenizer.json
STANDIN_NAMES = (STANDIN_NAME, FAST_STANDIN_NAME)
# The remote code, kept as modules of this package (linted, packaged) and copied into the folder as files.
REMOTE_CODE_MODULES = (
    "eagle_datagen.standin.kimi_remote.tokenization_kimi",
    "eagle_datagen.standin.kimi_remote.tool_declaration_ts",
)
REMOTE_CODE_FILES = tuple(module.rsplit(".", 1)[1] + ".py" for module in REMOTE_CODE_MODULES)

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


def build_vocab(corpus: str) -> dict[str, int]:
    """Token (in GPT-2 byte characters) -> id of the ordinary BPE tokens: bytes, learned tokens, `assistant`."""
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
    return vocab


def tiktoken_ranks(vocab: dict[str, int]) -> dict[bytes, int]:
    """The vocabulary as tiktoken's mergeable ranks (token bytes -> rank)."""
    char_byte = {char: b for b, char in gpt2_byte_to_char().items()}
    return {bytes(char_byte[c] for c in token): i for token, i in vocab.items()}


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[str, str]]:
    """Merges under which a `tokenizers` BPE gives tiktoken's ids: tiktoken joins any two adjacent parts whose
    concatenation is a token, lowest rank first, so every split of a token into two lower-ranked tokens is a
    merge, ranked by the token it makes."""
    byte_char = gpt2_byte_to_char()

    def chars(data: bytes) -> str:
        return "".join(byte_char[b] for b in data)

    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        for k in range(1, len(token)):
            left, right = ranks.get(token[:k]), ranks.get(token[k:])
            if left is not None and right is not None and left < rank and right < rank:
                merges.append((chars(token[:k]), chars(token[k:])))
    return merges


def write_tiktoken_model(ranks: dict[bytes, int], path: Path) -> None:
    lines = [f"{base64.b64encode(token).decode()} {rank}" for token, rank in sorted(ranks.items(), key=lambda x: x[1])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_tokenizer_object(corpus: str) -> Tokenizer:
    """The fast stand-in as a `tokenizers.Tokenizer` with ids at the real Kimi positions and tiktoken's merges."""
    vocab = build_vocab(corpus)
    merges = merges_from_ranks(tiktoken_ranks(vocab))
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


def build_fast_standin(output_dir: str | Path) -> Path:
    """Write a transformers-loadable fast tokenizer directory (tokenizer.json, config, chat template)."""
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
        "Fast stand-in for the Kimi-K2.5 tokenizer built by eagle-datagen (eagle_datagen.standin): the ids of "
        "standin:kimi-k2.5 as a plain tokenizer.json, without remote code. Tool declarations are JSON here, "
        "TypeScript in the remote-code stand-in and the real tokenizer.\n",
        encoding="utf-8",
    )
    return output_dir


def _added_tokens_decoder() -> dict[str, dict[str, object]]:
    return {
        str(token_id): {
            "content": text,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for token_id, text, special in special_token_table()
    }


def build_standin_kimi_tokenizer(output_dir: str | Path) -> Path:
    """Write the remote-code stand-in: the real Kimi-K2.5 tokenizer folder's files, with toy BPE ranks."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_tiktoken_model(tiktoken_ranks(build_vocab(_read_resource("corpus.txt"))), output_dir / "tiktoken.model")
    for name in REMOTE_CODE_FILES:
        (output_dir / name).write_text(_read_resource(f"kimi_remote/{name}"), encoding="utf-8")
    (output_dir / "chat_template.jinja").write_text(_read_resource("kimi_k25_chat_template.jinja"), encoding="utf-8")
    config = {
        "added_tokens_decoder": _added_tokens_decoder(),
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "extra_special_tokens": {},
        "model_max_length": 262144,
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
    }
    (output_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    model_config = {
        "model_type": "kimi_k25",
        "vocab_size": MODEL_VOCAB_SIZE,
        "architectures": ["KimiK25ForConditionalGeneration"],
    }
    (output_dir / "config.json").write_text(json.dumps(model_config, indent=2) + "\n", encoding="utf-8")
    (output_dir / "STANDIN.md").write_text(
        "Stand-in for the Kimi-K2.5 tokenizer built by eagle-datagen (eagle_datagen.standin), shaped like the real "
        "folder: remote code over tiktoken (load with trust_remote_code). Special ids (258, up to 163841), the "
        "chat template's shape and the TypeScript tool declarations match; the BPE ranks are a toy set.\n",
        encoding="utf-8",
    )
    return output_dir


def build_fingerprint() -> str:
    digest = hashlib.sha256(BUILD_VERSION.encode())
    for name in ("corpus.txt", "kimi_k25_chat_template.jinja", *(f"kimi_remote/{n}" for n in REMOTE_CODE_FILES)):
        digest.update(_read_resource(name).encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def default_cache_root() -> Path:
    return Path(os.environ.get("EAGLE_DATAGEN_CACHE", Path.home() / ".cache" / "eagle-datagen"))


@cache
def standin_tokenizer_dir(cache_root: str | None = None, name: str = STANDIN_NAME) -> Path:
    """Path of the cached stand-in `name`, building it first (atomically, safe for parallel callers)."""
    if name not in STANDIN_NAMES:
        raise ValueError(f"unknown stand-in {name!r}")
    root = Path(cache_root) if cache_root else default_cache_root()
    target = root / f"standin-{name}-{build_fingerprint()}"
    if (target / "tokenizer_config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        (build_standin_kimi_tokenizer if name == STANDIN_NAME else build_fast_standin)(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its build is identical
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
