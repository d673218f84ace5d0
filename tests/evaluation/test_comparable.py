"""Two deployments compare only when measured alike: the same target model and weight version, the same draft
settings (only the drafter itself may differ) and the same sampling in every category and mode both have, the
instant mode's included; each difference is one part of the refusal's one line, or recorded when accepted."""

from __future__ import annotations

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.evaluation.comparable import check_comparable, differences, sampling_by_mode_of


def deployment(draft="drafter-a", weight_version="default", steps=3, model="moonshotai/Kimi-K2.5"):
    speculative = {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": draft,
        "speculative_draft_model_revision": None,
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": steps + 1,
        "speculative_accept_threshold_single": 1.0,
        "speculative_accept_threshold_acc": 1.0,
        "speculative_token_map": None,
    }
    server = {"url": "http://a", "model_path": model, "weight_version": weight_version, "speculative": speculative}
    return {"label": draft, "urls": ["http://a"], "servers": [server]}


SAMPLING = {
    "chat": {
        "thinking": {"max_new_tokens": 400, "temperature": 1.0, "top_p": 0.95},
        "instant": {"max_new_tokens": 400, "temperature": 0.6, "top_p": 0.95},
    }
}


def test_only_the_drafter_may_differ():
    assert differences(deployment(), deployment(draft="drafter-b"), SAMPLING, SAMPLING) == []


def test_each_difference_is_named_with_both_sides():
    found = differences(
        deployment(), deployment(draft="b", weight_version="v2", steps=5, model="other/model"), SAMPLING, SAMPLING
    )
    assert found[0] == "model: A moonshotai/Kimi-K2.5, B other/model"
    assert found[1] == "weight version: A default, B v2"
    assert found[2].startswith("draft settings: A {") and "'speculative_num_steps': 5" in found[2]
    assert len(found) == 3


def test_the_instant_modes_sampling_is_compared_too():
    theirs = {"chat": SAMPLING["chat"] | {"instant": SAMPLING["chat"]["instant"] | {"temperature": 1.0}}}
    [found] = differences(deployment(), deployment(), SAMPLING, theirs)
    assert found.startswith("sampling of chat (instant): A {") and "'temperature': 1.0" in found
    only_thinking = {"chat": {"thinking": SAMPLING["chat"]["thinking"]}}  # modes only one side has: not compared
    assert differences(deployment(), deployment(), SAMPLING, only_thinking) == []


def test_results_before_modes_sampled_every_prompt_as_thinking():
    old = {"sampling": {"chat": SAMPLING["chat"]["thinking"]}}
    assert sampling_by_mode_of(old) == {"chat": {"thinking": SAMPLING["chat"]["thinking"]}}


def test_a_difference_refuses_in_one_line_unless_accepted():
    found = ["weight version: A default, B v2"]
    with pytest.raises(ConfigError) as refused:
        check_comparable(found, "baseline x.json", allowed=False, front_end="cli")
    assert "\n" not in str(refused.value) and "--allow-comparison-mismatch" in str(refused.value)
    with pytest.raises(ConfigError, match="the allow_comparison_mismatch param"):
        check_comparable(found, "baseline x.json", allowed=False, front_end="airflow")
    assert check_comparable(found, "baseline x.json", allowed=True, front_end="cli") == found
    assert check_comparable([], "baseline x.json", allowed=False, front_end="cli") == []
