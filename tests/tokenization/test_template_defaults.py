"""The real Kimi tokenizer's `apply_chat_template` has other defaults than transformers' (`tokenize=False,
add_generation_prompt=True`, and it deep-sorts the tool schemas); the stand-in has transformers' defaults.
Every call the pipeline makes passes both arguments, so the prompt ids are the same with either tokenizer:
this wraps the stand-in in an `apply_chat_template` with the real one's signature (as tokenization_kimi.py
writes it) and checks that the load-time check, tokenization and the canary give the same ids."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from eagle_datagen.records import validate_record
from eagle_datagen.tokenization.loader import check_tokenizer
from eagle_datagen.tokenization.tokenize import tokenize_batch

from conftest import user_record

TOOL = {
    "type": "function",
    "function": {
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "name": "search",
        "description": "Search the web",
    },
}


def deep_sort_dict(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: deep_sort_dict(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [deep_sort_dict(item) for item in obj]
    return obj


class KimiDefaults:
    """The stand-in behind the real tokenizer's apply_chat_template signature; everything else delegated."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner(*args, **kwargs)

    def apply_chat_template(self, conversation, tools=None, tokenize=False, add_generation_prompt=True, **kwargs):
        self.calls.append({"tokenize": tokenize, "add_generation_prompt": add_generation_prompt})
        return self._inner.apply_chat_template(
            conversation,
            tools=deep_sort_dict(tools),
            tokenize=tokenize,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )


def records():
    plain = validate_record(user_record("What is 2+2?"), "o:1")
    with_tools = validate_record(user_record("Find the news", tools=[TOOL]), "o:2")
    return [plain, with_tools]


def test_the_pipeline_gives_the_same_ids_under_the_real_tokenizers_defaults(tokenizer, kimi_profile):
    wrapped = KimiDefaults(tokenizer)
    check_tokenizer(wrapped, kimi_profile, "kimi-defaults")
    limits = {"*": 10_000}
    expected, rejects = tokenize_batch(tokenizer, kimi_profile, records(), limits)
    got, wrapped_rejects = tokenize_batch(wrapped, kimi_profile, records(), limits)
    assert not rejects and not wrapped_rejects
    assert [p.prompt_ids for p in got] == [p.prompt_ids for p in expected]
    assert expected[0].prompt_ids[-10:] == [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]
    # every call said what it wanted: the defaults never decided anything
    assert wrapped.calls and all(c["add_generation_prompt"] is True for c in wrapped.calls)


def test_the_canary_passes_both_arguments_too(loaded_tokenizer):
    from eagle_datagen.generation.stage import RunOptions, canary_request

    wrapped = KimiDefaults(loaded_tokenizer.tokenizer)
    setup = SimpleNamespace(
        loaded=replace(loaded_tokenizer, tokenizer=wrapped), recipe=None, profile=loaded_tokenizer.profile
    )
    body = canary_request(setup, RunOptions(prompts=None, sglang_urls=[]))
    assert body is not None and isinstance(body["input_ids"], list) and body["input_ids"][-1] == 163606
    assert wrapped.calls == [{"tokenize": True, "add_generation_prompt": True}]
