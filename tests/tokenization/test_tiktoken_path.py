"""The opt-in fast path over the Kimi tokenizer's tiktoken.Encoding (tokenization/tiktoken_path.py): off by default
(the tokenizer's own call makes every id); opted in, the ids of the own call (transformers' generic slow path
through the real-shaped remote code), proven at load, refused where a folder could make the two differ, texts
beyond the remote code's chunking limits through the own call, and a run-time spot check that stops in one line."""

from __future__ import annotations

import logging

import pytest
from tokenizers import AddedToken

from eagle_datagen.records import validate_record
from eagle_datagen.tokenization import tiktoken_path
from eagle_datagen.tokenization.canaries import render_canaries
from eagle_datagen.tokenization.loader import load_tokenizer
from eagle_datagen.tokenization.tiktoken_path import (
    SPOT_CHECK_EVERY,
    TiktokenPath,
    TokenizerPathMismatch,
    beyond_chunking_limits,
    own_call,
)
from eagle_datagen.tokenization.tokenize import tokenize_prompts
from standin_variants import (
    add_to_class,
    copy_standin,
    edit_tokenizer_config,
    replace_in_remote_code,
    set_added_token_flag,
    swap_byte_ranks,
)

from conftest import user_record

LONG_RUN = "the" * 9000  # 27,000 characters without whitespace: the remote code cuts it, tiktoken alone does not


@pytest.fixture(scope="module")
def fast_loaded(kimi_profile):
    """The stand-in with the fast path opted in."""
    return load_tokenizer("standin:kimi-k2.5", kimi_profile, trust_remote_code=True, tiktoken_fast_path=True)


def test_the_default_is_the_tokenizers_own_call(loaded_tokenizer, tokenizer, caplog):
    assert loaded_tokenizer.tiktoken_encoding is None and loaded_tokenizer.encode_path == tiktoken_path.OWN_CALL
    assert loaded_tokenizer.provenance()["encode_path"] == "own_call"
    texts = ["a\tb <think> c", LONG_RUN]
    assert loaded_tokenizer.encoder()(texts) == own_call(tokenizer, texts)


def test_the_stand_in_is_proven_and_its_fast_path_gives_the_own_calls_ids(fast_loaded, tokenizer):
    loaded_tokenizer = fast_loaded
    assert loaded_tokenizer.tiktoken_encoding is not None
    assert loaded_tokenizer.provenance()["encode_path"] == "tiktoken_fast_path"
    texts = [
        *render_canaries(tokenizer).values(),
        "<think>hi</think><|im_end|>  trailing   spaces\n\n\tand tabs 12345678 ＡＢＣ",
        "<|reserved_token_163700|> and [BOS] inline, <|im_user|><|im_middle|> adjacent",
        LONG_RUN,
        "word " * 90_000,  # 450,000 characters: the remote code encodes it in two pieces
    ]
    fast = loaded_tokenizer.encoder()(texts)
    assert fast == own_call(tokenizer, texts)
    raw = [tokenizer.model.encode(t, allowed_special="all") for t in texts]
    assert raw[:-2] == fast[:-2] and raw[-2] != fast[-2] and raw[-1] != fast[-1]  # the long ones took the own call


def test_texts_beyond_the_chunking_limits_are_recognised():
    assert not beyond_chunking_limits("a" * 25_000 + " " + "b" * 25_000)
    assert beyond_chunking_limits("a" * 25_001)
    assert beyond_chunking_limits("x" + "\u3000" * 25_001)  # ideographic space is whitespace to str.isspace()
    assert beyond_chunking_limits("ab " * 140_000)  # 420,000 characters


def test_the_pipeline_gives_the_same_ids_with_and_without_the_fast_path(fast_loaded, loaded_tokenizer):
    slow, loaded_tokenizer = loaded_tokenizer, fast_loaded
    assert slow.tiktoken_encoding is None
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    rows = [user_record(f"question {i}: 多少 is {i}+{i}?") for i in range(70)]
    rows += [user_record(LONG_RUN), {**user_record("call f"), "tools": [tool]}]
    records = [validate_record(row, origin=f"t:{i}") for i, row in enumerate(rows)]
    with_fast_path = tokenize_prompts(loaded_tokenizer, records, 100_000, processes=1, batch_size=16)
    own = tokenize_prompts(slow, records, 100_000, processes=1, batch_size=16)
    two_processes = tokenize_prompts(loaded_tokenizer, records, 100_000, processes=2, batch_size=16)
    assert not own.rejects and len(own.prompts) == len(records)
    expected = [p.prompt_ids for p in own.prompts]
    assert [p.prompt_ids for p in with_fast_path.prompts] == expected
    assert [p.prompt_ids for p in two_processes.prompts] == expected


def test_one_text_in_spot_check_every_is_compared_with_the_own_call(fast_loaded, tokenizer, monkeypatch):
    seen = []

    def counting(tok, texts):
        seen.extend(texts)
        return own_call(tok, texts)

    monkeypatch.setattr(tiktoken_path, "own_call", counting)
    encode = fast_loaded.encoder()
    texts = [f"text {i}" for i in range(2 * SPOT_CHECK_EVERY + 3)]
    encode(texts[:5])
    encode(texts[5:])
    assert seen == [texts[0], texts[SPOT_CHECK_EVERY], texts[2 * SPOT_CHECK_EVERY]]


def test_a_spot_check_mismatch_stops_in_one_line(standin_dir, tmp_path, kimi_profile, tokenizer):
    folder = copy_standin(standin_dir, tmp_path / "tok-swapped")
    question, at = swap_byte_ranks(folder)
    wrong = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True, announce=False, tiktoken_fast_path=True)
    wrong = wrong.tiktoken_encoding
    encode = TiktokenPath(tokenizer, wrong, "standin:kimi-k2.5")
    with pytest.raises(TokenizerPathMismatch) as info:
        encode(["Is it?", "fine"])
    line = str(info.value)
    assert "\n" not in line and "'Is it?'" in line and "without --tiktoken-fast-path" in line
    assert f"fast path {at}, own call {question}" in line, line


def loaded_variant(standin_dir, tmp_path, kimi_profile, name, change, caplog):
    folder = copy_standin(standin_dir, tmp_path / name)
    change(folder)
    with caplog.at_level(logging.WARNING, logger="eagle_datagen.tokenization.loader"):
        loaded = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True, tiktoken_fast_path=True)
    [warning] = [r.getMessage() for r in caplog.records if "fast path was asked for" in r.getMessage()]
    assert loaded.tiktoken_encoding is None  # every text through the own call
    return loaded, warning


@pytest.mark.parametrize(
    "name, change, reason",
    [
        ("lstrip", lambda f: set_added_token_flag(f, "<think>", "lstrip"), "added token '<think>' has lstrip set"),
        ("rstrip", lambda f: set_added_token_flag(f, "<|im_end|>", "rstrip"), "'<|im_end|>' has rstrip set"),
        ("normalized", lambda f: set_added_token_flag(f, "[EOT]", "normalized"), "'[EOT]' has normalized set"),
        ("split", lambda f: edit_tokenizer_config(f, split_special_tokens=True), "split_special_tokens is on"),
        (
            "override",
            lambda f: add_to_class(f, "    def tokenize(self, text, **kwargs):\n        return super().tokenize(text)"),
            "TikTokenTokenizer overrides transformers' tokenize",
        ),
        (
            "tab",  # a _tokenize that changes the text: only the check texts can show it
            lambda f: replace_in_remote_code(
                f, "for i in self.encode(text)]", "for i in self.encode(text.replace('\\t', '    '))]"
            ),
            "a check text gives other ids:",
        ),
    ],
)
def test_a_folder_that_could_make_the_paths_differ_goes_through_its_own_call(
    standin_dir, tmp_path, kimi_profile, caplog, name, change, reason
):
    loaded, warning = loaded_variant(standin_dir, tmp_path, kimi_profile, f"tok-{name}", change, caplog)
    assert reason in warning and "every prompt is encoded by the tokenizer's own call" in warning, warning
    texts = ["a\tb <think> c", "x <|im_end|> y"]
    assert loaded.encoder()(texts) == own_call(loaded.tokenizer, texts)


def test_an_added_token_that_is_not_the_encodings_special_is_refused(standin_dir, tmp_path, kimi_profile):
    folder = copy_standin(standin_dir, tmp_path / "tok-added")
    loaded = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True, announce=False, tiktoken_fast_path=True)
    loaded.tokenizer.add_tokens([AddedToken("<extra_token>", normalized=False)])
    why = tiktoken_path.prove(loaded.tokenizer, loaded.tokenizer.model, [])
    assert why is not None and "'<extra_token>'" in why and "is not the encoding's special token" in why


def test_opting_in_is_said_as_a_warning(kimi_profile, caplog):
    with caplog.at_level(logging.INFO, logger="eagle_datagen.tokenization.loader"):
        loaded = load_tokenizer("standin:kimi-k2.5", kimi_profile, trust_remote_code=True, tiktoken_fast_path=True)
    assert loaded.tiktoken_encoding is not None
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "as opted in (tiktoken_fast_path)" in warning.getMessage()
    assert "not exact by construction" in warning.getMessage()


def test_a_tokenizer_without_tiktoken_has_no_fast_path(kimi_profile):
    loaded = load_tokenizer("standin:kimi-k2.5-fast", kimi_profile, announce=False, tiktoken_fast_path=True)
    assert loaded.tiktoken_encoding is None and tiktoken_path.tiktoken_encoding(loaded.tokenizer) is None
