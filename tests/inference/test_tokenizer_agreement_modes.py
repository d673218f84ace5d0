"""The tokenizer check renders its canaries in every mode the run sends (tokenizer_agreement.py): a server whose
chat template differs from the client's only in instant mode (`thinking=False`) passes a thinking-only check and is
caught by the run's, which records the modes it compared; here against serve-sim loading a copy of the stand-in
whose template lacks the instant switch."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from eagle_datagen.inference.preflight import RunLevelError
from eagle_datagen.inference.tokenizer_agreement import AgreementResult, agreement_check
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.storage.manifest import read_manifest
from eagle_datagen.storage.output_root import open_output_root
from eagle_datagen.tokenization.canaries import CANARIES
from generation_runs import run_cli
from standin_variants import copy_standin, ignore_instant_switch

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow
BOTH = {"thinking": {}, "instant": {"thinking": False}}  # profiles/kimi-k2.5.yaml's template variables


@pytest.fixture(scope="module")
def sim():
    with SimServerThread(SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant")) as server:
        yield server


@pytest.fixture(scope="module")
def no_switch(tmp_path_factory, standin_dir):
    """A server whose chat template renders instant mode as thinking (no `thinking` switch)."""
    folder = copy_standin(standin_dir, tmp_path_factory.mktemp("noswitch") / "tok")
    ignore_instant_switch(folder)
    with SimServerThread(SimConfig(tokenizer_path=str(folder)).with_profile("instant")) as server:
        yield server


def checked(url: str, tokenizer, **how) -> AgreementResult:
    async def go() -> AgreementResult:
        async with aiohttp.ClientSession() as session:
            return await agreement_check(tokenizer, **how)(session, [url])

    return asyncio.run(go())


def test_both_modes_are_rendered_sent_and_recorded(sim, tokenizer):
    before = sim.stats()["polls"].get("POST /v1/tokenize", 0)
    both = AgreementResult({}, {sim.url: "messages"}, ("thinking", "instant"))
    assert checked(sim.url, tokenizer, modes=BOTH) == both
    assert sim.stats()["polls"].get("POST /v1/tokenize") - before == 2 * len(CANARIES)


def test_a_server_that_differs_only_in_instant_mode_is_caught_by_the_check_of_both_modes(no_switch, tokenizer):
    assert checked(no_switch.url, tokenizer).left_out == {}  # thinking alone: it passes
    with pytest.raises(RunLevelError) as info:
        checked(no_switch.url, tokenizer, modes=BOTH)
    line = str(info.value)
    assert "\n" not in line and "canary 'plain (instant mode)'" in line, line
    assert "client 163607 '</think>'" in line and "server the end of the prompt" in line, line


def test_a_mixed_run_compares_both_modes_records_them_and_refuses_a_server_without_the_switch(sim, no_switch, tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(f"question {i}?") for i in range(4)])

    def args(run_id: str, url: str, mode: str) -> list[str]:
        return ["--prompts", str(src), "--output", str(tmp_path / "out"), "--run-id", run_id, "--sglang-url", url,
                "--draft-vocab-size", "8", "--mode", mode]  # fmt: skip

    def validation(run_id: str) -> dict:
        return read_manifest(open_output_root(str(tmp_path / "out")), run_id)["validation"]

    mixed = run_cli(args("mix", sim.url, "mix"))
    assert mixed.returncode == 0, mixed.stderr[-3000:]
    assert "rendered in thinking mode and instant mode" in mixed.stderr
    assert validation("mix")["tokenizer_check"] == {sim.url: "messages"}
    assert validation("mix")["tokenizer_check_modes"] == ["instant", "thinking"]

    thinking = run_cli(args("thinking", no_switch.url, "thinking"))  # it sends no instant prompt: nothing to catch
    assert thinking.returncode == 0, thinking.stderr[-3000:]
    assert validation("thinking")["tokenizer_check_modes"] == ["thinking"]

    refused = run_cli(args("mix2", no_switch.url, "mix"))
    assert refused.returncode != 0
    [line] = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert "canary 'plain (instant mode)'" in line, line
