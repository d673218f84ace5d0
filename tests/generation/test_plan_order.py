"""Plan order: a conversation's steps (each a record of its own) land in one shard, in order, and nothing else moves."""

from __future__ import annotations

import random

from eagle_datagen.generation.plan import split_into_shards
from eagle_datagen.generation.plan_order import extensions_together
from eagle_datagen.records import validate_record
from eagle_datagen.tokenization.tokenize import TokenizedPrompt

from conftest import user_record

THINK = 163606


def conversation(turns: list[list[int]]) -> list[int]:
    """A conversation's ids: each turn, then the generation prompt's <think> (which the next step's prompt
    continues, as the Kimi template renders the history)."""
    return [i for turn in turns for i in [*turn, THINK]]


def step(history: list[int], n: int) -> list[int]:
    """The prompt of step n (1, 2, ...): the first n turns of a conversation of 10-id turns."""
    return history[: 10 * n]


def test_a_conversations_steps_move_to_its_first_step_and_come_in_order():
    history = conversation([list(range(1000 + 9 * t, 1009 + 9 * t)) for t in range(4)])
    a = [7, 7, 7, THINK]
    b = [8, 8, THINK]
    items = [step(history, 3), a, step(history, 1), b, step(history, 2), step(history, 4)]
    # the family sits where its first member was (first), steps by length; the others keep their order
    assert extensions_together(items, list) == [
        step(history, 1),
        step(history, 2),
        step(history, 3),
        step(history, 4),
        a,
        b,
    ]


def test_prompts_sharing_only_a_system_prompt_keep_the_datasets_order():
    rng = random.Random(1)
    system = [rng.randrange(160_000) for _ in range(300)]
    prompts = [system + [rng.randrange(160_000) for _ in range(20)] + [THINK] for _ in range(50)]
    assert extensions_together(prompts, list) == prompts


def test_identical_prompts_are_one_family():
    items = [("x", [1, 2, THINK]), ("y", [3, THINK]), ("z", [1, 2, THINK])]
    assert [name for name, _ in extensions_together(items, lambda item: item[1])] == ["x", "z", "y"]


def test_a_shorter_prompt_that_is_not_a_prefix_stays_apart():
    # [1, 2] sorts before [1, 2, 3] and [1, 3]: only [1, 2, 3] extends it; [1, 3] is its own family
    items = [[1, 3], [5], [1, 2, 3], [1, 2]]
    assert extensions_together(items, list) == [[1, 3], [5], [1, 2], [1, 2, 3]]


def test_split_into_shards_keeps_a_conversations_steps_in_one_shard():
    rng = random.Random(0)
    histories = [conversation([[rng.randrange(2000, 160_000) for _ in range(9)] for _ in range(4)]) for _ in range(10)]
    prompts = [(c, n, step(histories[c], n)) for c in range(10) for n in range(1, 5)]
    prompts += [(None, i, [rng.randrange(2000, 160_000) for _ in range(30)] + [THINK]) for i in range(20)]
    rng.shuffle(prompts)  # a dataset's order
    planned = [
        (TokenizedPrompt(validate_record(user_record(f"p{i}", category="agent", id=f"p{i}"), "o"), ids), [0, 1])
        for i, (_, _, ids) in enumerate(prompts)
    ]
    conversation_of = {f"p{i}": (c, n) for i, (c, n, _) in enumerate(prompts)}
    shards = split_into_shards(planned, 8)
    assert sum(info.prompts for info, _ in shards) == 60 and all(info.prompts <= 8 for info, _ in shards)
    where: dict[int, list[tuple[int, int]]] = {}
    for info, rows in shards:
        for position, (prompt, _) in enumerate(rows):
            c, n = conversation_of[prompt.record.record_id]
            if c is not None:
                where.setdefault(c, []).append((info.index, position))
    # the 4 steps of each conversation: in one shard unless it is cut at the shard's end, then in the next,
    # and always in step order, one after another
    for c, places in where.items():
        flat = [index * 8 + position for index, position in places]
        assert flat == list(range(flat[0], flat[0] + 4)), (c, places)


def _streamed_order(items: list[list[int]], batch: int = 7) -> list[int]:
    import pyarrow as pa

    from eagle_datagen.generation.plan_order import family_order

    def batches():
        for start in range(0, len(items), batch):
            yield pa.array(items[start : start + batch], type=pa.list_(pa.int32()))

    return family_order(batches, len(items)).tolist()


def _dataset(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    system = [rng.randrange(160_000) for _ in range(40)]
    items: list[list[int]] = []
    for _ in range(30):  # conversations, some branching after a step, some steps twice
        history = conversation([[rng.randrange(2000, 160_000) for _ in range(9)] for _ in range(5)])
        steps = [step(history, n) for n in range(1, rng.randrange(2, 6))]
        if rng.random() < 0.3:
            steps.append(steps[0] + [rng.randrange(2000, 160_000) for _ in range(12)] + [THINK])
        if rng.random() < 0.2:
            steps.append(list(rng.choice(steps)))
        items += steps
    items += [system + [rng.randrange(160_000) for _ in range(rng.randrange(1, 30))] + [THINK] for _ in range(40)]
    items += [[1, 2], [1, 2, 3], [1, 3], [5], [1, 2, 3]]
    rng.shuffle(items)
    return items


def test_the_streamed_order_is_extensions_together():
    """family_order (prefix hashes over batches, for plans of any size) gives extensions_together's order."""
    for seed in range(20):
        items = _dataset(seed)
        expected = extensions_together(list(range(len(items))), items.__getitem__)
        assert _streamed_order(items, batch=1 + seed % 9) == expected, seed


def test_the_streamed_order_of_the_examples_above():
    history = conversation([list(range(1000 + 9 * t, 1009 + 9 * t)) for t in range(4)])
    items = [step(history, 3), [7, 7, 7, THINK], step(history, 1), [8, 8, THINK], step(history, 2), step(history, 4)]
    assert _streamed_order(items) == [2, 4, 0, 5, 1, 3]
    assert _streamed_order([[1, 2, THINK], [3, THINK], [1, 2, THINK]]) == [0, 2, 1]
    assert _streamed_order([[1, 3], [5], [1, 2, 3], [1, 2]]) == [0, 1, 3, 2]


def test_the_streamed_order_is_the_same_when_families_are_placed_a_few_at_a_time(monkeypatch):
    """Families are placed in slices of ROOT_SLICE (prompts without extensions as arrays): any slice size gives
    extensions_together's order."""
    from eagle_datagen.generation import plan_order

    for size in (1, 2, 3, 64):
        monkeypatch.setattr(plan_order, "ROOT_SLICE", size)
        for seed in range(5):
            items = _dataset(seed)
            expected = extensions_together(list(range(len(items))), items.__getitem__)
            assert _streamed_order(items, batch=5) == expected, (size, seed)
