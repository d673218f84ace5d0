"""The canary check names each server misconfiguration in one line."""

from __future__ import annotations

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.preflight import check_canary, same_model


def answer(ids, finish=None, completion=None):
    finish = finish or {"type": "stop", "matched": 163586}
    return {
        "text": "",
        "output_ids": ids,
        "meta_info": {"finish_reason": finish, "completion_tokens": len(ids) if completion is None else completion},
    }


def test_a_good_canary(kimi_profile):
    assert check_canary("u", answer([5, 6, 163607, 7, 163586]), kimi_profile) == []


@pytest.mark.parametrize(
    ("ids", "extra", "message"),
    [
        ([5, 6, 7, 163586], {}, "without </think> .*strips think tokens .*a proxy or gateway"),
        ([163606, 5, 163586], {}, "without </think> \\(163607\\)"),
        ([163606, 5, 163607, 163586], {}, "generated <think> although the prompt already ends in it"),
        ([5, 163607, 7], {}, "not the EOS 163586"),
        ([9, 9, 5, 163607, 163586], {"completion": 3}, "prompt-echo bug"),
        ([], {"finish": {"type": "abort", "message": "no"}}, "aborted the canary"),
    ],
)
def test_misconfigured_servers(kimi_profile, ids, extra, message):
    with pytest.raises(ConfigError, match=message) as info:
        check_canary("http://s", answer(ids, **extra), kimi_profile)
    assert "\n" not in str(info.value) and "http://s" in str(info.value)


def test_a_truncated_canary_is_a_warning(kimi_profile):
    [warning] = check_canary("u", answer([5, 6], {"type": "length", "length": 2}), kimi_profile)
    assert "max_new_tokens" in warning


def test_model_names_match_on_their_last_component():
    assert same_model("/models/Kimi-K2.5/", "moonshotai/Kimi-K2.5")
    assert same_model("moonshotai/kimi-k2.5", "moonshotai/Kimi-K2.5")
    assert not same_model("Qwen/Qwen3-8B", "moonshotai/Kimi-K2.5")
