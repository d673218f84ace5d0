"""Modes (modes.py): which mode each prompt gets, the sampling of each mode, the identity of a sample of each mode,
rendering in a mode, and the one-line refusals before any GPU time."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from eagle_datagen.conversation.job import ConversationJob, conversation_id_for
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.mode_check import check_modes
from eagle_datagen.generation.stage import RunOptions, SamplingOverrides, category_settings
from eagle_datagen.inference.samples import SampleRequest, make_sample_id
from eagle_datagen.modes import prompt_mode
from eagle_datagen.profile import load_profile, parse_profile
from eagle_datagen.records import PromptRecord
from eagle_datagen.sources.recipe import parse_recipe
from eagle_datagen.tokenization.stage import TokenizeOptions, setup_tokenize
from eagle_datagen.tokenization.tokenize import tokenize_batch

from conftest import write_jsonl

KIMI = load_profile("kimi-k2.5")
SAMPLING = {"max_new_tokens": 64, "temperature": 1.0, "top_p": 0.95}
RECIPE = {
    "seed": 7,
    "defaults": {"sampling": {"max_new_tokens": 512}},
    "categories": {
        "chat": {"sources": ["a.jsonl"], "mode": "mix", "instant_fraction": 0.25},
        "math": {"sources": ["b.jsonl"]},
        "code": {"sources": ["c.jsonl"], "mode": "instant", "sampling": {"temperature": 0.3}},
    },
}


def test_a_prompt_s_mode_is_a_seeded_pure_function_of_it():
    ids = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(4000)]
    modes = [prompt_mode("mix", 0.3, 7, p) for p in ids]
    assert modes == [prompt_mode("mix", 0.3, 7, p) for p in ids]  # reruns and resumes agree
    assert 0.27 < modes.count("instant") / len(ids) < 0.33
    assert modes != [prompt_mode("mix", 0.3, 8, p) for p in ids]  # the seed chooses
    # raising the share only moves prompts from thinking to instant
    more = [prompt_mode("mix", 0.6, 7, p) for p in ids]
    assert all(b == "instant" for a, b in zip(modes, more, strict=True) if a == "instant")
    assert {prompt_mode("mix", 0.0, 7, p) for p in ids} == {"thinking"}
    assert {prompt_mode("mix", 1.0, 7, p) for p in ids} == {"instant"}
    assert (
        prompt_mode("instant", None, 7, ids[0]) == "instant" and prompt_mode("thinking", 0.9, 7, ids[0]) == "thinking"
    )


def test_each_mode_samples_with_the_profile_s_recommendation_for_it():
    chosen = category_settings(["chat", "math", "code"], parse_recipe(RECIPE), KIMI, SamplingOverrides(), seed=7)
    chat, math, code = chosen["chat"], chosen["math"], chosen["code"]
    assert (chat.mode, chat.instant_fraction, chat.mode_seed) == ("mix", 0.25, 7)
    assert chat.sampling_of("thinking") == {"max_new_tokens": 512, "temperature": 1.0, "top_p": 0.95}
    assert chat.sampling_of("instant") == {"max_new_tokens": 512, "temperature": 0.6, "top_p": 0.95}
    assert (math.mode, math.instant_sampling, math.instant_fraction) == ("thinking", None, None)
    assert code.sampling == {"max_new_tokens": 512, "temperature": 0.3, "top_p": 0.95}  # the category's wins
    # a flag (or the form) wins over every layer, in every mode; --mode applies to every category
    forced = category_settings(
        ["chat", "code"], parse_recipe(RECIPE), KIMI, SamplingOverrides(temperature=0.9, mode="mix", instant_fraction=1)
    )
    assert {forced["chat"].sampling_of(m)["temperature"] for m in ("thinking", "instant")} == {0.9}
    assert forced["code"].mode == "mix" and forced["code"].instant_fraction == 1


def test_a_mode_the_profile_lacks_is_refused_in_one_line():
    for mode in ("instant", "mix"):
        with pytest.raises(ConfigError, match=r"^profile deepseek-r1 declares no instant mode .*use mode thinking"):
            category_settings(["x"], None, load_profile("deepseek-r1"), SamplingOverrides(mode=mode))
    qwen = category_settings(["x"], None, load_profile("qwen3"), SamplingOverrides(mode="instant"))["x"]
    assert qwen.sampling == {"max_new_tokens": 8192, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
    with pytest.raises(ConfigError, match="mode"):
        parse_recipe({"categories": {"chat": {"sources": ["a.jsonl"], "mode": "fast"}}})


def test_a_profile_s_instant_block_is_checked():
    raw = {
        "name": "p",
        "model": "m",
        "vocab_size": 100,
        "context_length": 50,
        "thinking": "prefilled",
        "tokens": {
            "think_start": {"text": "<t>", "id": 1},
            "think_end": {"text": "</t>", "id": 2},
            "eos": {"text": "e", "id": 3},
        },
        "prompt_suffix": ["think_start"],
    }
    assert parse_profile(raw).modes == ("thinking",)
    good = raw | {"instant": {"template_kwargs": {"thinking": False}, "prompt_suffix": ["think_start", "think_end"]}}
    assert parse_profile(good).mode("instant").prompt_suffix_ids == (1, 2)
    for bad, said in (
        ({"prompt_suffix": ["think_start", "think_end"]}, "template_kwargs"),
        ({"template_kwargs": {"thinking": False}, "prompt_suffix": ["think_start"]}, "close the think block"),
        ({"template_kwargs": {"x": 1}, "prompt_suffix": ["think_start", "think_end"], "speed": 2}, "a mapping of"),
    ):
        with pytest.raises(ConfigError, match=said):
            parse_profile(raw | {"instant": bad})


def test_the_modes_of_one_prompt_are_two_samples():
    """Both modes of a prompt may be generated (a mix over runs, a fraction changed): their ids, seeds and
    conversations differ even under the same sampling; a thinking sample's id is what it was before modes."""
    prompt_id = "ab" * 32
    thinking = make_sample_id(prompt_id, 0, "moonshotai/Kimi-K2.5", SAMPLING, "thinking")
    before_modes = f"{prompt_id}:0:moonshotai/Kimi-K2.5:" + json.dumps(
        dict(sorted(SAMPLING.items())), separators=(",", ":")
    )
    assert thinking == hashlib.sha256(before_modes.encode()).hexdigest()[:32]
    instant = make_sample_id(prompt_id, 0, "moonshotai/Kimi-K2.5", SAMPLING, "instant")
    assert instant != thinking
    requests = [
        SampleRequest.create(
            prompt_id=prompt_id, record_id=None, category="c", sample_index=0, prompt_ids=[1],
            model="m", sampling=SAMPLING, mode=mode,
        )
        for mode in ("thinking", "instant")
    ]  # fmt: skip
    assert requests[0].sampling["sampling_seed"] != requests[1].sampling["sampling_seed"]
    assert "mode" not in requests[1].sampling  # never an SGLang sampling key
    assert conversation_id_for(prompt_id, 0) != conversation_id_for(prompt_id, 0, "instant")
    job = ConversationJob(prompt_id, None, "c", 0, [], None, "m", SAMPLING, 8, mode="instant")
    assert job.first_sample_id == make_sample_id(prompt_id, 0, "m", SAMPLING, "instant")


def record(text: str, mode: str) -> PromptRecord:
    return PromptRecord("p" * 64, None, "chat", [{"role": "user", "content": text}], None, None, "t:1", mode)


def test_a_prompt_is_rendered_in_its_mode(tokenizer):
    done, rejects = tokenize_batch(tokenizer, KIMI, [record("hi", "thinking"), record("hi", "instant")], {})
    assert not rejects
    assert done[0].prompt_ids[-1] == 163606 and done[0].prompt_ids[-2] != 163606
    assert done[1].prompt_ids[-2:] == [163606, 163607]
    assert done[1].prompt_ids[:-1] == done[0].prompt_ids  # the same prompt, its think block closed


def ignoring_template(standin_dir: Path, tmp_path: Path) -> Path:
    """A copy of the stand-in whose template ignores `thinking` (always the thinking generation prompt)."""
    target = tmp_path / "tok"
    shutil.copytree(standin_dir, target)
    template = (target / "chat_template.jinja").read_text()
    (target / "chat_template.jinja").write_text(
        template.replace(
            "{%- set thinking_on = thinking is not defined or thinking -%}", "{%- set thinking_on = true -%}"
        )
    )
    return target


def test_a_template_that_ignores_the_switch_is_refused_before_any_gpu_time(standin_dir, tmp_path):
    path = ignoring_template(standin_dir, tmp_path)
    source = write_jsonl(tmp_path / "p.jsonl", [{"category": "chat", "messages": [{"role": "user", "content": "hi"}]}])
    prompts = TokenizeOptions(
        output=str(tmp_path / "out"), tokenizer=str(path), prompts=[str(source)], trust_remote_code=True
    )
    setup = setup_tokenize(prompts)
    check_modes(setup, RunOptions(prompts, ["http://x"]))  # thinking only: no switch needed
    with pytest.raises(ConfigError, match=r"ignores \{'thinking': False\}: an instant prompt ends in .*'</think>'"):
        check_modes(setup, RunOptions(prompts, ["http://x"], sampling=SamplingOverrides(mode="mix")))
    # record by record, tokenization says the same
    _, rejects = tokenize_batch(setup.loaded.tokenizer, KIMI, [record("hi", "instant")], {})
    assert rejects[0].reason == "prompt_suffix_mismatch" and "honour {'thinking': False}" in rejects[0].detail
