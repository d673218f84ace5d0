"""The frozen held-out split: the prompts that no export ever holds, so that a drafter is scored on prompts it
was never trained on (`eagle-datagen evaluate --output ROOT`).

A prompt is held out when a stable hash of its key falls below the output root's fraction. The key is the prompt
id of the record's first prompt (its messages up to and including the first user message, with its tools): for a
record with one user message, its own `prompt_id`; every step of a `turns: each` conversation, and every record
that opens with the same first prompt, share it, so a conversation's first step (which is exactly that prompt) is
never trained on while the same prompt is held out elsewhere. The rule reads nothing but the prompt and the
fraction, so a prompt once held out stays held out in every later run, release and backfill, whatever is added.

The fraction is frozen per output root by the first run that plans there to generate (`heldout/policy.json`,
written once; a dry run plans with the fraction it would freeze and writes nothing): a later run asking for
another fraction is refused before any GPU time. Held-out prompts are still generated
(the rows are the evaluation's prompt set and cost ~2% of a run); their rows carry `heldout = true`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from eagle_datagen import settings
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.records import PromptRecord, compute_prompt_id
from eagle_datagen.storage.objects import ObjectCollision, put_once
from eagle_datagen.storage.output_root import OutputRoot

POLICY_KEY = "heldout/policy.json"
POLICY_SCHEMA = "eagle-datagen/heldout-policy/v1"
_SALT = b"eagle-datagen/heldout/v1:"  # a hash of its own: nothing else that orders prompts by id correlates with it
RULE = "sha256('eagle-datagen/heldout/v1:' + key) read as a fraction (its first 8 bytes / 2**64) < fraction"
KEY = "prompt_id of the record's first prompt: its messages up to the first user message, and its tools"


def first_prompt(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages up to and including the first user message (all of them when there is none)."""
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            return messages[: index + 1]
    return messages


def heldout_key(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    return compute_prompt_id(first_prompt(messages), tools)


def record_key(record: PromptRecord) -> str:
    """`heldout_key` of a record; its own `prompt_id` (no second hash) when its first prompt is all of it."""
    first = first_prompt(record.messages)
    return record.prompt_id if len(first) == len(record.messages) else heldout_key(first, record.tools)


def position(key: str) -> float:
    """Where the key falls in [0, 1): a prompt is held out under every fraction above it."""
    digest = hashlib.sha256(_SALT + key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_heldout(key: str, fraction: float) -> bool:
    return position(key) < fraction


@dataclass(frozen=True)
class HeldoutPolicy:
    fraction: float
    created_at: str
    created_by: str  # the run that froze it
    published_before: list[str]  # runs published under the root before it: their rows carry no heldout column
    schema: str = POLICY_SCHEMA
    key: str = KEY
    rule: str = RULE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> HeldoutPolicy:
        if not isinstance(raw, dict) or raw.get("schema") != POLICY_SCHEMA:
            raise DataGenError(f"{POLICY_KEY} is not an eagle-datagen held-out policy ({POLICY_SCHEMA})")
        return cls(**{k: raw[k] for k in ("fraction", "created_at", "created_by", "published_before")})

    def holds_out(self, key: str) -> bool:
        return is_heldout(key, self.fraction)


def heldout_rows(marks: list[bool | None], prompt_ids: list[str], policy: HeldoutPolicy | None) -> list[bool]:
    """Which stored rows are held out: those marked so (their `heldout` column), and, in rows written before the
    column (null), those whose `prompt_id` the root's policy holds out (the key of every single-turn prompt)."""
    return [
        mark if mark is not None else policy is not None and policy.holds_out(prompt_id)
        for mark, prompt_id in zip(marks, prompt_ids, strict=True)
    ]


def read_policy(root: OutputRoot) -> HeldoutPolicy | None:
    if POLICY_KEY not in root.list(POLICY_KEY):
        return None
    return HeldoutPolicy.from_json(json.loads(root.read_bytes(POLICY_KEY)))


def _refused(root: OutputRoot, policy: HeldoutPolicy, wanted: float, front_end: str) -> ConfigError:
    flag = settings.named("heldout_fraction", front_end)
    return ConfigError(
        f"{root.uri} froze its held-out fraction at {policy.fraction:g} ({POLICY_KEY}, run {policy.created_by}): "
        f"a run asking for {wanted:g} is refused, since prompts held out before would be trained on; leave "
        f"{flag} unset (or set it to {policy.fraction:g}), or use another output root"
    )


def check_policy(root: OutputRoot, wanted: float | None, front_end: str = "cli") -> HeldoutPolicy | None:
    """The root's policy (None: none yet); ConfigError when `wanted` is not its fraction. Writes nothing."""
    policy = read_policy(root)
    if policy is not None and wanted is not None and wanted != policy.fraction:
        raise _refused(root, policy, wanted, front_end)
    return policy


def provisional_policy(root: OutputRoot, wanted: float | None, run_id: str, front_end: str = "cli") -> HeldoutPolicy:
    """The root's policy, or the one a run would freeze now (`wanted`, else the default), written nowhere: a dry
    run plans with it and leaves the choice of the fraction to the first run that generates."""
    policy = check_policy(root, wanted, front_end)
    if policy is not None:
        return policy
    from eagle_datagen.storage.manifest import manifest_run_ids

    fraction = settings.default_of("heldout_fraction") if wanted is None else wanted
    return HeldoutPolicy(
        fraction=float(fraction),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        created_by=run_id,
        published_before=manifest_run_ids(root),
    )


def freeze_policy(root: OutputRoot, wanted: float | None, run_id: str, front_end: str = "cli") -> HeldoutPolicy:
    """The root's policy, written now (write-once) with `wanted` (else the default) if it has none."""
    policy = check_policy(root, wanted, front_end)
    if policy is not None:
        return policy
    policy = provisional_policy(root, wanted, run_id, front_end)
    try:
        put_once(root, POLICY_KEY, json.dumps(policy.to_json(), indent=1).encode())
    except ObjectCollision:  # another run froze it first: its fraction holds
        return check_policy(root, wanted, front_end) or policy
    return policy
