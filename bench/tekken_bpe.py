"""A real byte-level BPE vocabulary for the storage benchmark: Mistral's Tekken, as a `tokenizers.Tokenizer`.

Tekken is the tiktoken-style BPE of Mistral NeMo and Pixtral (150,000 ranks trained on multilingual text and
code). The file ships in the `mistral-common` wheel (Apache-2.0) as `mistral_common/data/tekken_240911.json`:
its ranks in merge order (`token_bytes`, base64) and the pre-tokenizer's split pattern. Nothing of it is
committed here; install it with `.venv/bin/python -m pip install --no-deps mistral-common==1.13.1`
(`--no-deps`: the file is read as data, the package is never imported, and its numpy pin would clash).

As in Kimi-K2.5's tiktoken file, a token's id is its rank, so frequent tokens (merged early) have small ids.
The conversion keeps every rank, not just the 130,072 Mistral's models use, because 150,000 is closer to
Kimi's 163,584 and, like Kimi's, needs 18 bits. Merges are recovered from the ranks the usual way (a
token's merge is the pair that BPE with only the lower ranks leaves it in) and `ignore_merges` makes a
word that is itself a token one id, as tiktoken does: on 1.2 M tokens of the benchmark's corpus the ids
were identical to tiktoken's with the same ranks and pattern.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models

from eagle_datagen.standin.kimi_tokenizer import byte_level_pre_tokenizer, gpt2_byte_to_char

TEKKEN_FILE = "tekken_240911.json"
INSTALL_HINT = "install it with `.venv/bin/python -m pip install --no-deps mistral-common==1.13.1`"


class MissingInput(RuntimeError):
    """Something the benchmark's natural-text input needs is not installed (the message says what to do)."""


def find_tekken(path: str | None = None) -> Path:
    """The Tekken file: `path` if given, else the one in the installed mistral-common (not imported)."""
    if path is not None:
        if not Path(path).is_file():
            raise MissingInput(f"tokenizer file {path} does not exist; {INSTALL_HINT} or pass another --tekken")
        return Path(path)
    spec = importlib.util.find_spec("mistral_common")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / "data" / TEKKEN_FILE
        if candidate.is_file():
            return candidate
    raise MissingInput(f"the Tekken vocabulary (mistral_common/data/{TEKKEN_FILE}) is not installed; {INSTALL_HINT}")


def _lowest_rank_split(token: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """BPE of `token` with only the ranks below its own: a reachable token ends as the pair it merges."""
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < limit and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def tekken_tokenizer(path: Path) -> Tokenizer:
    """A `tokenizers` byte-level BPE whose ids are Tekken's ranks (0-149,999), without special tokens."""
    data = json.loads(path.read_text(encoding="utf-8"))
    ranks = {base64.b64decode(entry["token_bytes"]): entry["rank"] for entry in data["vocab"]}
    byte_char = gpt2_byte_to_char()

    def chars(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    merges = []
    for token, _ in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            parts = _lowest_rank_split(token, ranks)
            if len(parts) == 2:
                merges.append((chars(parts[0]), chars(parts[1])))
    vocab = {chars(token): rank for token, rank in ranks.items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True, fuse_unk=False))
    tokenizer.pre_tokenizer = byte_level_pre_tokenizer(data["config"]["pattern"])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer
