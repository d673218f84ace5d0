"""One fixed sequence of /generate requests, sent one after the other, whose `meta_info.cached_tokens` serve-sim
must report as the real SGLang server does (test_differential.py::test_cached_tokens_follow_the_real_server).

Every request is greedy with a fixed max_new_tokens. Outputs enter the radix tree, and the two servers answer
with different ids (two different models), so a prompt that extends an earlier answer is built from that
server's own answer; each step also states the value SGLang's rules give (docs/internals/prefix_cache.md), so the test
fails when SGLang changes them, not only when the two disagree. Prompts stay far below either cache's size
(a few thousand ids against 65,536 and 500,000), so nothing is evicted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import requests

MAX_NEW = 16  # the tiny model stops on EOS after 3 ids, before this
CUT = 8  # max_new_tokens of the answer that runs to its limit (ignore_eos)


def fresh(seed: int, n: int) -> list[int]:
    """n ordinary ids (well below the tiny model's vocab of 163,840 and serve-sim's special ids)."""
    rng = random.Random(seed)
    return [rng.randrange(1_000, 150_000) for _ in range(n)]


@dataclass(frozen=True)
class Seen:
    """One request of the sequence as one server answered it."""

    name: str
    prompt_len: int
    cached: tuple[int, ...]  # meta_info.cached_tokens, one per answer (n = 2 gives two)
    details: tuple[Any, ...]  # meta_info.cached_tokens_details
    expected: tuple[int, ...]  # what SGLang's rules give for this server's own earlier answers


def generate(session: requests.Session, url: str, prompt: list[int], **sampling: Any) -> list[dict]:
    body = {"input_ids": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": MAX_NEW, **sampling}}
    response = session.post(url + "/generate", json=body, timeout=300)
    assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:300]}"
    answer = response.json()
    return answer if isinstance(answer, list) else [answer]


def flush(session: requests.Session, url: str) -> None:
    # right after an answer SGLang's scheduler may not have retired the last batch yet (its overlap loop), and a
    # plain flush then fails with a 400: wait for idle
    response = session.post(url + "/flush_cache?timeout=30", json={}, timeout=60)
    assert response.status_code == 200, f"{url}: /flush_cache answered {response.status_code} {response.text}"


def replay(session: requests.Session, url: str) -> list[Seen]:
    """The sequence against the server at `url`, its cache flushed first; each request after the previous one
    finished (no two share a prefill batch)."""
    seen: list[Seen] = []

    def send(name: str, prompt: list[int], expected: int | list[int], **sampling: Any) -> dict:
        answers = generate(session, url, prompt, **sampling)
        meta = [a["meta_info"] for a in answers]
        expect = tuple(expected) if isinstance(expected, list) else (expected,)
        seen.append(Seen(name, len(prompt), tuple(m["cached_tokens"] for m in meta),
                         tuple(m["cached_tokens_details"] for m in meta), expect))  # fmt: skip
        return answers[0]

    flush(session, url)
    a = fresh(1, 300)
    first = send("a fresh prompt", a, 0)
    assert first["meta_info"]["finish_reason"]["type"] == "stop", first["meta_info"]  # it stopped on EOS
    stopped = first["output_ids"]
    send("the same prompt again", a, len(a) - 1)  # the last prompt id is always computed
    # A request that stopped on a stop id before max_new_tokens leaves its whole output in the tree (the
    # overlap scheduler had already computed the stop id's KV); serve-sim did drop the last id here.
    send("extends the prompt and its answer (stopped on EOS)", a + stopped + fresh(2, 40), len(a) + len(stopped))
    b = fresh(3, 250)
    cut = send("a fresh prompt, answered to max_new_tokens", b, 0, max_new_tokens=CUT, ignore_eos=True)["output_ids"]
    assert len(cut) == CUT
    send("extends the prompt and its answer (cut at max_new_tokens)", b + cut + fresh(4, 30), len(b) + CUT - 1)
    d = fresh(8, 220)
    last = send("a fresh prompt, EOS as its last allowed id", d, 0, max_new_tokens=3)
    assert last["meta_info"]["finish_reason"]["type"] == "stop" and len(last["output_ids"]) == 3, last["meta_info"]
    send("extends the prompt and its answer (EOS at max_new_tokens)", d + last["output_ids"] + fresh(9, 20),
         len(d) + 3 - 1)  # fmt: skip
    send("extends the prompt and the answer's first id", a + stopped[:1] + fresh(10, 20), len(a) + 1)
    send("extends the prompt only", a + fresh(5, 50), len(a))
    send("a prefix of an earlier prompt", a[:200], 199)
    send("shares 130 ids with an earlier prompt (mid-block)", a[:130] + fresh(6, 100), 130)
    c = fresh(7, 200)
    send("n = 2", c, [len(c) - 1] * 2, n=2)  # the prompt is prefilled alone first, then both samples hit it
    send("the n = 2 prompt again", c, len(c) - 1)
    flush(session, url)
    send("the first prompt after /flush_cache", a, 0)
    send("one id", [5], 0)
    send("the same one id", [5], 0)  # at most len - 1 = 0
    send("two ids sharing the first", [5, 6], 1)
    send("the same two ids", [5, 6], 1)
    send("three ids extending them", [5, 6, 7], 2)
    send("three ids, first one differs", [9, 5, 6], 0)
    flush(session, url)  # leave the shared server as it was found
    return seen
