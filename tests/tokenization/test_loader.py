"""Loading a tokenizer checks it against the model profile and stops with one clear line if it disagrees."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.profile import available_profiles, load_profile, parse_profile
from eagle_datagen.tokenization.loader import load_tokenizer, template_sha256


def variant(standin_dir: Path, tmp_path: Path, template: str | None) -> Path:
    """A copy of the stand-in with another chat template (None: no template at all)."""
    target = tmp_path / "tok"
    shutil.copytree(standin_dir, target)
    (target / "chat_template.jinja").unlink()
    if template is not None:
        (target / "chat_template.jinja").write_text(template)
    return target


def test_standin_loads_and_records_hashes(loaded_tokenizer, standin_dir):
    assert loaded_tokenizer.chat_template_sha256 == template_sha256((standin_dir / "chat_template.jinja").read_text())
    assert len(loaded_tokenizer.tokenizer_sha256) == 64
    assert loaded_tokenizer.provenance()["profile"] == "kimi-k2.5"


def test_tokenizer_without_chat_template(standin_dir, tmp_path, kimi_profile):
    path = variant(standin_dir, tmp_path, None)
    with pytest.raises(ConfigError, match="has no chat template"):
        load_tokenizer(str(path), kimi_profile, trust_remote_code=True)


def test_template_that_does_not_end_in_think(standin_dir, tmp_path, kimi_profile):
    template = (standin_dir / "chat_template.jinja").read_text().replace("<|im_middle|><think>\n", "<|im_middle|>\n")
    template = template.replace("assistant<|im_middle|><think>", "assistant<|im_middle|>")
    path = variant(standin_dir, tmp_path, template)
    with pytest.raises(ConfigError, match=r"does not end the prompt in '<think>' \(163606\)") as info:
        load_tokenizer(str(path), kimi_profile, trust_remote_code=True)
    assert "\n" not in str(info.value)


def test_template_that_fails_to_render(standin_dir, tmp_path, kimi_profile):
    path = variant(standin_dir, tmp_path, "{{ raise_exception('no thanks') }}")
    with pytest.raises(ConfigError, match="fails on a one-message prompt: no thanks"):
        load_tokenizer(str(path), kimi_profile, trust_remote_code=True)


def test_profile_mismatch_names_the_token(tokenizer, kimi_profile, standin_dir):
    raw = {
        "name": "other",
        "model": "x/y",
        "vocab_size": 163840,
        "context_length": 1000,
        "thinking": "prefilled",
        "tokens": {
            "think_start": {"text": "<think>", "id": 5},
            "think_end": {"text": "</think>", "id": 163607},
            "eos": {"text": "<|im_end|>", "id": 163586},
        },
        "prompt_suffix": ["think_start"],
    }
    with pytest.raises(ConfigError, match=r"'<think>' \(think_start\) is id 163606, expected 5"):
        load_tokenizer(str(standin_dir), parse_profile(raw), trust_remote_code=True)


def small_profile(kimi_profile, vocab_size: int):
    return parse_profile(
        {
            "name": "small",
            "model": "x",
            "vocab_size": vocab_size,
            "context_length": 1000,
            "thinking": "generated",
            "tokens": {k: {"text": v.text, "id": v.id} for k, v in kimi_profile.tokens.items()},
            "prompt_suffix": ["think_start"],
        }
    )


def test_a_tokenizer_larger_than_the_model_is_accepted_and_says_so(standin_dir, kimi_profile, caplog):
    """As Kimi-K2.5's real tokenizer (163,842 ids for 163,840 embedding rows): accepted, said once (INFO)."""
    small = small_profile(kimi_profile, 163700)
    with caplog.at_level("INFO", logger="eagle_datagen.tokenization.loader"):
        loaded = load_tokenizer(str(standin_dir), small, trust_remote_code=True)
    expected = sum(1 for i in loaded.tokenizer.get_vocab().values() if i >= 163700)
    assert expected >= 140 and loaded.ids_beyond_vocab == expected
    [warning] = [r.getMessage() for r in caplog.records if "beyond" in r.getMessage()]
    assert f"has {expected} id(s) beyond x's vocabulary of 163700" in warning and "id_beyond_model_vocab" in warning
    assert "163700 '<|reserved_token_" in warning and "more)" in warning
    caplog.clear()
    with caplog.at_level("INFO", logger="eagle_datagen.tokenization.loader"):
        load_tokenizer(
            str(standin_dir), small, trust_remote_code=True, announce=False
        )  # a worker process: the parent said it
    assert not [r for r in caplog.records if "beyond" in r.getMessage()]


def test_missing_directory_and_unknown_standin(tmp_path, kimi_profile):
    with pytest.raises(ConfigError, match="tokenizer directory not found"):
        load_tokenizer(str(tmp_path / "nope"), kimi_profile)
    with pytest.raises(ConfigError, match="unknown stand-in tokenizer"):
        load_tokenizer("standin:llama", kimi_profile)


def test_hub_id_without_network_is_a_clear_error(kimi_profile):
    with pytest.raises(ConfigError, match="cannot load tokenizer nobody/no-such-model"):
        load_tokenizer("nobody/no-such-model", kimi_profile)


def test_shipped_profiles_parse():
    assert {"kimi-k2.5", "qwen3", "deepseek-r1"} <= set(available_profiles())
    for name in available_profiles():
        profile = load_profile(name)
        assert profile.eos.id < profile.vocab_size
    kimi = load_profile("kimi-k2.5")
    assert (kimi.prompt_suffix_ids, kimi.think_end.id, kimi.eos.id) == ((163606,), 163607, 163586)
    assert (kimi.vocab_size, kimi.context_length, kimi.thinking) == (163840, 262144, "prefilled")


def test_a_new_model_is_a_yaml_file_not_code(tmp_path, standin_dir):
    path = tmp_path / "my-model.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "my-model",
                "model": "me/my-model",
                "vocab_size": 163840,
                "context_length": 4096,
                "thinking": "generated",
                "tokens": {
                    "think_start": {"text": "<think>", "id": 163606},
                    "think_end": {"text": "</think>", "id": 163607},
                    "eos": {"text": "<|im_end|>", "id": 163586},
                    "middle": {"text": "<|im_middle|>", "id": 163601},
                },
                "prompt_suffix": ["middle", "think_start"],
            }
        )
    )
    profile = load_profile(str(path))
    assert profile.prompt_suffix_ids == (163601, 163606)
    assert load_tokenizer(str(standin_dir), profile, trust_remote_code=True).profile.name == "my-model"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"thinking": "maybe"}, "thinking must be"),
        ({"vocab_size": -1}, "vocab_size must be a positive integer"),
        ({"prompt_suffix": ["nope"]}, "unknown token 'nope'"),
        ({"tokens": {"eos": {"text": "x", "id": 1}}}, "tokens.think_start is required"),
        ({"extra": 1}, "unknown key"),
        ({"prompt_suffix": ["eos"]}, "needs prompt_suffix to end in think_start"),
    ],
)
def test_bad_profiles(kimi_profile, change, message):
    raw = {
        "name": "p",
        "model": "m",
        "vocab_size": 163840,
        "context_length": 10,
        "thinking": "prefilled",
        "tokens": {k: {"text": v.text, "id": v.id} for k, v in kimi_profile.tokens.items()},
        "prompt_suffix": ["think_start"],
    } | change
    with pytest.raises(ConfigError, match=message):
        parse_profile(raw)


def test_unknown_profile_name():
    with pytest.raises(ConfigError, match="unknown profile 'llama'"):
        load_profile("llama")
