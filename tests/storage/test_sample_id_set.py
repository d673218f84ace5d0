"""Sample ids as 16-byte digests: the text round trip, and the sorted-array set the catalog and the claims use."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from eagle_datagen.inference.samples import make_sample_id, sample_id_digests, sample_id_tail
from eagle_datagen.storage.sample_id_set import DIGEST, SampleIdSet, digests_from_hex, hex_strings

SAMPLING = {"temperature": 1.0, "top_p": 0.95, "max_new_tokens": 64}


def ids(n: int, start: int = 0) -> list[str]:
    return [make_sample_id(f"p{i}", i % 3, "m", SAMPLING) for i in range(start, start + n)]


def test_digests_are_the_bytes_the_ids_spell_and_give_back_the_same_text():
    text = ids(50)
    digests = digests_from_hex(text)
    assert digests.dtype == DIGEST and [bytes.fromhex(t) for t in text] == [d.ljust(16, b"\0") for d in digests]
    assert hex_strings(digests).to_pylist() == text
    assert hex_strings(digests_from_hex(ids(70_000))).to_pylist() == ids(70_000)  # more than one slice
    assert digests_from_hex(pa.chunked_array([text[:20], text[20:]])).tolist() == digests.tolist()
    assert hex_strings(digests_from_hex(pa.array(text).slice(7, 5))).to_pylist() == text[7:12]  # an offset


def test_an_id_digest_ending_in_zero_bytes_keeps_them():
    text = "ab" * 8 + "00" * 8
    assert hex_strings(digests_from_hex([text])).to_pylist() == [text]
    assert text in SampleIdSet.of([text]) and "ab" * 8 + "00" * 7 + "01" not in SampleIdSet.of([text])


def test_sample_id_digests_are_make_sample_id_prompt_by_prompt_in_sample_index_order():
    prompts = ["a", "b", "c"]
    raw = sample_id_digests(prompts, 4, sample_id_tail("m", SAMPLING))
    expected = [make_sample_id(p, k, "m", SAMPLING) for p in prompts for k in range(4)]
    assert hex_strings(np.frombuffer(raw, DIGEST)).to_pylist() == expected
    assert sample_id_digests(prompts, 0, sample_id_tail("m", SAMPLING)) == b""


def test_membership():
    held, other = ids(1000), ids(500, start=1000)
    s = SampleIdSet.of(held)
    assert len(s) == 1000 and all(i in s for i in held[::37]) and not any(i in s for i in other[::37])
    mask = s.contains(digests_from_hex(other[:250] + held[:250]).reshape(50, 10))  # any shape, answered in place
    assert mask.shape == (50, 10) and not mask.reshape(-1)[:250].any() and mask.reshape(-1)[250:].all()
    assert set(s) == set(held)
    assert 42 not in s and "not an id" not in s


def test_the_empty_set():
    empty = SampleIdSet()
    assert len(empty) == 0 and not empty and list(empty) == []
    assert empty.contains(digests_from_hex(ids(3))).tolist() == [False] * 3
    assert SampleIdSet.of(ids(3)).contains(np.empty(0, DIGEST)).shape == (0,)
    assert len(SampleIdSet.of([])) == 0 and len(empty.union(empty)) == 0
    assert set(empty.union(SampleIdSet.of(ids(2)))) == set(ids(2))


def test_duplicates_count_once_and_a_union_merges():
    text = ids(10)
    s = SampleIdSet.of(text + text[:4] + text[::-1])
    assert len(s) == 10 and set(s) == set(text)
    merged = SampleIdSet.of(text[:6]).union(SampleIdSet.of(text[4:]), digests_from_hex(ids(3, start=100)))
    assert len(merged) == 13 and set(merged) == set(text) | set(ids(3, start=100))


def test_ids_that_are_not_32_lowercase_hex_digits_are_left_out():
    good = ids(2)
    assert set(SampleIdSet.of([good[0], "short", good[1].upper(), "g" * 32, good[1]])) == set(good)
    assert len(digests_from_hex(pa.array([good[0], None, good[1]]))) == 2


def test_a_bad_id_past_the_first_slice_is_found():
    text = ids(70_000)
    text[69_000] = " " * 32  # fromhex skips whitespace: the length check finds it
    text[69_001] = text[69_001].upper()
    assert len(digests_from_hex(text)) == 69_998


def test_has_answers_for_one_digest_with_trailing_zero_bytes_too():
    ending = bytes.fromhex("ab" * 8 + "00" * 8)
    s = SampleIdSet(np.frombuffer(b"".join([ending, bytes(16), b"\xff" * 16]), DIGEST))
    assert s.has(ending) and s.has(bytes(16)) and s.has(b"\xff" * 16)
    assert not s.has(bytes.fromhex("ab" * 8 + "00" * 7 + "01")) and not s.has(b"\xfe" * 16)
    assert not SampleIdSet().has(ending)
