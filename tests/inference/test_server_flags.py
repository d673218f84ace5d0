"""The server checklist: one table judges every server, in the preflight and in `eagle-datagen check`, and
docs/server-checklist.md is generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.preflight import check_server_flags
from eagle_datagen.inference.server_flags import DOC_START, SERVER_FLAGS, judge_server_flags

REPO = Path(__file__).resolve().parents[2]
URL = "http://sglang:30000"
# what a plain SGLang 0.5.23 reports for the judged keys when started without any of them
PLAIN = {
    "enable_watermark": False,
    "allow_auto_truncate": False,
    "speculative_accept_threshold_single": 1.0,
    "speculative_accept_threshold_acc": 1.0,
    "preferred_sampling_params": None,
    "reasoning_parser": None,
    "tool_call_parser": None,
    "enable_deterministic_inference": True,
}


def test_the_page_is_generated_from_the_table():
    from eagle_datagen.cli.reference import generated

    text = (REPO / "docs/server-checklist.md").read_text()
    assert DOC_START in text, "docs/server-checklist.md lost its generated table"
    assert text == generated(text), (
        "docs/server-checklist.md is stale: run `.venv/bin/python -m eagle_datagen.cli.reference`"
    )
    for row in SERVER_FLAGS:
        assert f"| `{row.flag}` |" in text


def test_a_plain_server_is_judged_clean():
    assert set(PLAIN) == {row.key for row in SERVER_FLAGS}  # every row has its plain value here
    assert judge_server_flags(URL, PLAIN) == []
    assert judge_server_flags(URL, {}) == []  # an older server that reports none of them: nothing to judge


@pytest.mark.parametrize(
    ("changes", "flag", "verdict"),
    [
        ({"enable_watermark": True}, "--enable-watermark", "refuse"),
        ({"allow_auto_truncate": True}, "--allow-auto-truncate", "refuse"),
        ({"speculative_accept_threshold_acc": 0.5}, "--speculative-accept-threshold-acc 0.5", "refuse"),
        ({"speculative_accept_threshold_single": 0.9}, "--speculative-accept-threshold-single 0.9", "refuse"),
        (
            {"preferred_sampling_params": {"repetition_penalty": 1.1}},
            '--preferred-sampling-params {"repetition_penalty": 1.1}',
            "warn",
        ),
        ({"reasoning_parser": "kimi_k2"}, "--reasoning-parser kimi_k2", "warn"),
        ({"tool_call_parser": "kimi_k2"}, "--tool-call-parser kimi_k2", "warn"),
        ({"enable_deterministic_inference": False}, "no --enable-deterministic-inference", "warn"),
    ],
)
def test_each_row_names_the_argument_why_and_the_fix(changes, flag, verdict):
    [judged] = judge_server_flags(URL, PLAIN | changes)
    assert judged.flag.verdict == verdict
    assert judged.line.startswith(f"SGLang at {URL} runs with {flag}: ") and "; fix: " in judged.line
    assert "\n" not in judged.line


def test_the_preflight_refuses_the_first_refused_argument_and_warns_of_the_others():
    with pytest.raises(ConfigError, match="--enable-watermark"):
        check_server_flags(URL, PLAIN | {"enable_watermark": True, "allow_auto_truncate": True})
    warnings = check_server_flags(URL, PLAIN | {"reasoning_parser": "kimi_k2", "enable_deterministic_inference": False})
    # the seed warning is said once per run for all servers (warn_seed_not_reproducible), not per server
    assert len(warnings) == 1 and "--reasoning-parser kimi_k2" in warnings[0]
    assert "OpenAI endpoints only" in warnings[0]


def test_serve_sim_reports_faked_server_arguments():
    import argparse

    from eagle_datagen.standin.sglang.cli import _server_arg

    assert _server_arg("allow_auto_truncate=true") == ("allow_auto_truncate", True)
    assert _server_arg("reasoning_parser=kimi_k2") == ("reasoning_parser", "kimi_k2")
    assert _server_arg('preferred_sampling_params={"min_p": 0.1}') == ("preferred_sampling_params", {"min_p": 0.1})
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=JSON"):
        _server_arg("no-equals-sign")
