"""A training mix: per-category weights and a mode filter, applied to the rows an export reads.

Weights over- or undersample a category, deterministically: a category of `n` rows (read, after the mode filter)
with weight `w` gets `floor(w)` copies of every row, plus one more copy of the `round(frac(w) x n)` rows (halves
rounded up, computed exactly from the weight as written) that rank first by sha256(seed, category, sample_id).
So `math=2` doubles math, `chat=0.5` keeps half of chat (the same half for the same seed, whatever the other
categories or the order of the files), `code=1.5` gives every code row once and half of them twice, `x=0`
leaves x out; a category the mix does not name keeps weight 1. The weights apply to the rows read, before the
sequence-length cut, so the rows a mix selects do not depend on `--max-seq-len`; a copy dropped by the cut is
dropped with its row.

The mode filter keeps the rows of the modes named (`thinking`, `instant`). Rows written before the `mode`
column existed are thinking-mode rows (the data contract's rule for them).

A two-phase training set is two exports of the same run or release with two mixes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle_datagen.errors import ConfigError
from eagle_datagen.records import CATEGORY_PATTERN
from eagle_datagen.sources.recipe import ALL_MIX, MIX_MODES, Recipe

MODE_COLUMN = "mode"
MODES = MIX_MODES  # thinking, instant
DEFAULT_MODE = "thinking"  # rows without a mode column (written before it existed) are thinking-mode rows
MAX_WEIGHT = 1000


@dataclass(frozen=True)
class ExportMix:
    weights: Mapping[str, float] = field(default_factory=dict)  # category -> weight; unnamed categories keep 1
    modes: tuple[str, ...] | None = None  # None: every mode
    seed: int = 0  # of the selection under a fractional weight
    name: str | None = None  # a named mix (the recipe's `mixes:`)

    @property
    def resamples(self) -> bool:
        return any(w != 1 for w in self.weights.values())

    def weight(self, category: str) -> float:
        return self.weights.get(category, 1.0)

    def check(self, categories: list[str], what: str) -> None:
        unknown = sorted(set(self.weights) - set(categories))
        if unknown:
            raise ConfigError(
                f"the mix weighs categories {unknown} that {what} does not export (it exports {categories}): fix --mix"
            )

    def to_json(self, categories: list[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "weights": {c: self.weight(c) for c in categories},
            "modes": list(self.modes) if self.modes is not None else list(MODES),
            "seed": self.seed,
            "rule": "floor(w) copies of every row, one more of the round(frac(w) x n) rows first by "
            "sha256(seed:category:sample_id)",
        }


def recipe_mix(recipe: Recipe | None, name: str) -> ExportMix:
    """The recipe's mix `name` (`all`: every category and mode, unweighted)."""
    if name == ALL_MIX:
        return ExportMix(name=ALL_MIX)
    if recipe is None or name not in recipe.mixes:
        if recipe is None:
            raise ConfigError(f"mix {name}: no recipe names it (the release DAG's recipe has no mixes:)")
        known = ", ".join([ALL_MIX, *recipe.mixes])
        raise ConfigError(f"mix {name}: recipe {recipe.name!r} has no such mix (it has {known}): check the name")
    spec = recipe.mixes[name]
    modes = tuple(spec.modes) if spec.modes is not None else None
    return ExportMix(weights=dict(spec.weights), modes=modes, seed=spec.seed, name=name)


def parse_weight(category: str, value: Any) -> float:
    if not CATEGORY_PATTERN.fullmatch(category):
        raise ConfigError(f"mix weight for {category!r}: a category is [a-z0-9][a-z0-9_-]{{0,63}}")
    try:
        weight = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"mix weight for {category}: {value!r} is not a number") from None
    if isinstance(value, bool) or not math.isfinite(weight) or not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"mix weight for {category}: {value!r} must be a number from 0 to {MAX_WEIGHT}")
    return weight


def parse_weights(text: str) -> dict[str, float]:
    """`math=2,chat=0.5` as {category: weight}."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        category, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"--mix {text!r}: give CATEGORY=WEIGHT pairs separated by commas (math=2,chat=0.5)")
        if category.strip() in weights:
            raise ConfigError(f"--mix {text!r}: {category.strip()} is weighed twice")
        weights[category.strip()] = parse_weight(category.strip(), value.strip())
    return weights


def parse_modes(text: str | list[str]) -> tuple[str, ...]:
    """`thinking,instant` as a tuple of known modes."""
    modes = [m.strip() for m in text.split(",")] if isinstance(text, str) else list(text)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ConfigError(f"--modes {','.join(modes)!r}: the modes are {', '.join(MODES)}")
    return tuple(dict.fromkeys(modes))


def with_modes(table: pa.Table) -> pa.Table:
    """The table with its `mode` column as text, null (and absent) as DEFAULT_MODE."""
    if MODE_COLUMN not in table.column_names:
        return table.append_column(MODE_COLUMN, pa.array([DEFAULT_MODE] * table.num_rows, pa.string()))
    index = table.column_names.index(MODE_COLUMN)
    modes = pc.fill_null(table.column(index).cast(pa.string()), DEFAULT_MODE)
    return table.set_column(index, MODE_COLUMN, modes)


def keep_modes(table: pa.Table, modes: tuple[str, ...] | None) -> pa.Table:
    if modes is None:
        return table
    return table.filter(pc.is_in(table.column(MODE_COLUMN), pa.array(modes, pa.string())))


def tally(table: pa.Table) -> dict[tuple[str, str], int]:
    """Rows per (category, mode) of a table with both columns."""
    if not table.num_rows:
        return {}
    pairs = table.select(["category", MODE_COLUMN])
    counts = pairs.group_by(["category", MODE_COLUMN]).aggregate([("category", "count")])
    return {
        (c, m): n
        for c, m, n in zip(
            counts.column("category").to_pylist(),
            counts.column(MODE_COLUMN).to_pylist(),
            counts.column("category_count").to_pylist(),
            strict=True,
        )
    }


def selection_keys(sample_ids: list[str], category: str, seed: int) -> np.ndarray:
    """The rank of each row under a fractional weight: the first 8 bytes of sha256(seed:category:sample_id)."""
    return np.fromiter(
        (int.from_bytes(hashlib.sha256(f"{seed}:{category}:{s}".encode()).digest()[:8], "big") for s in sample_ids),
        np.uint64,
        len(sample_ids),
    )


class MixPlan:
    """What a resampling mix needs of every row read (after the mode filter): its category and its rank key, 12
    bytes a row; `copies` gives each row's number of copies once every row has been read."""

    def __init__(self, mix: ExportMix) -> None:
        self.mix = mix
        self._codes: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self.categories: list[str] = []
        self._index: dict[str, int] = {}

    def observe(self, table: pa.Table) -> None:
        categories = table.column("category").to_pylist()
        sample_ids = table.column("sample_id").to_pylist()
        codes = np.empty(len(categories), np.int32)
        keys = np.empty(len(categories), np.uint64)
        for category in dict.fromkeys(categories):
            code = self._index.setdefault(category, len(self.categories))
            if code == len(self.categories):
                self.categories.append(category)
            rows = [i for i, c in enumerate(categories) if c == category]
            codes[rows] = code
            keys[rows] = selection_keys([sample_ids[i] for i in rows], category, self.mix.seed)
        self._codes.append(codes)
        self._keys.append(keys)

    def copies(self) -> np.ndarray:
        """Copies of each row read, in read order (int64)."""
        codes = np.concatenate(self._codes) if self._codes else np.zeros(0, np.int32)
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, np.uint64)
        copies = np.zeros(len(codes), np.int64)
        for code, category in enumerate(self.categories):
            rows = np.flatnonzero(codes == code)
            weight = Fraction(str(self.mix.weight(category)))
            base = math.floor(weight)
            extra = math.floor((weight - base) * len(rows) + Fraction(1, 2))
            copies[rows] = base
            if extra:
                first = rows[np.argsort(keys[rows], kind="stable")[:extra]]
                copies[first] += 1
        return copies
