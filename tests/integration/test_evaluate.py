"""`eagle-datagen evaluate` against stand-in servers whose per-request speculative metrics are known
(standin/sglang/speculative.py): the report's per-category accept lengths (output tokens / verify steps, also
without the prefill token, and the mean over prompts) and their bootstrap intervals are those of what the servers
returned, on exactly the held-out prompts of the output root; a server without a drafter is refused before any
request; failed requests are counted, never averaged in; two drafters compare prompt for prompt, live
(--compare-url) or against an earlier evaluation (--baseline); a comparison with nothing on one side exits 1, and
one measured otherwise (weight version, draft settings, sampling) is refused unless --allow-comparison-mismatch."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from eagle_datagen.cli import main
from eagle_datagen.evaluation.aggregate import summarize
from eagle_datagen.evaluation.records import read_records
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.generation.steps import run_generation
from eagle_datagen.standin.sglang.config import FaultRates, SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen.standin.sglang.speculative import SpeculativeConfig, spec_metrics
from eagle_datagen.storage.objects import sha256_hex
from eagle_datagen.storage.output_root import LocalOutputRoot
from generation_runs import run_options

from conftest import user_record, write_jsonl

pytestmark = pytest.mark.slow
SPEC_A = SpeculativeConfig(draft_model_path="drafter-new", accept_rate=0.8)
SPEC_B = SpeculativeConfig(draft_model_path="drafter-old", accept_rate=0.55)
TOKENIZER = ["--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """An output root with one published run of 80 prompts in two categories, 40% held out."""
    tmp = tmp_path_factory.mktemp("evaluate")
    records = [user_record(f"q {i}: " + "word " * (i % 17), category="math" if i % 2 else "chat") for i in range(80)]
    src = write_jsonl(tmp / "prompts.jsonl", records)
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        options = run_options(tmp, [sim.url], run_id="r1", heldout_fraction=0.4)
        run_generation(dataclasses.replace(options, prompts=dataclasses.replace(options.prompts, prompts=[str(src)])))
    return tmp / "out"


def speculative(spec: SpeculativeConfig, **faults) -> SimServerThread:
    config = dataclasses.replace(SimConfig().with_profile("instant"), speculative=spec, faults=FaultRates(**faults))
    return SimServerThread(config)


def evaluate(*args: str) -> int:
    return main(["evaluate", *TOKENIZER, "--max-new-tokens", "400", *args])


def results_of(root: Path, eval_id: str) -> tuple[dict, list[dict]]:
    results = json.loads((root / f"evaluations/eval={eval_id}.json").read_text())
    data = (root / f"evaluations/{results['records']['key']}").read_bytes()
    assert sha256_hex(data) == results["records"]["sha256"]
    return results, read_records(data).to_pylist()


def heldout_prompt_ids(root: Path) -> dict[str, str]:
    rows = []
    for part in root.glob("data/category=*/run=r1/*.parquet"):
        rows += pq.read_table(part, columns=["prompt_id", "category", "heldout"]).to_pylist()
    return {r["prompt_id"]: r["category"] for r in rows if r["heldout"]}


def bootstrap(pairs: list[tuple[float, float]], offset: float = 0.0) -> list[float]:
    """The interval docs/internals/evaluation.md describes, written again here: prompts in key order,
    numpy's default_rng(0),
    2,000 multinomial draws of n prompts, the ratio of the drawn totals, its 2.5% and 97.5% percentiles."""
    num, den = (np.array([p[i] for p in pairs], dtype=float) for i in (0, 1))
    counts = np.random.default_rng(0).multinomial(len(pairs), np.full(len(pairs), 1 / len(pairs)), size=2000)
    return list(offset + np.percentile((counts @ num) / (counts @ den), [2.5, 97.5]))


def per_prompt(records: list[dict], numerator) -> list[tuple[float, float]]:
    totals = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        if r["status"] == "ok":
            totals[(r["category"], r["prompt_key"])][0] += numerator(r)
            totals[(r["category"], r["prompt_key"])][1] += r["spec_verify_ct"]
    return [tuple(totals[k]) for k in sorted(totals)]


def expected_block(records: list[dict], metric: str) -> tuple[float, list[float]]:
    """The mean over prompts of a per-request metric (a prompt's value: its requests' mean), and its interval."""
    by_prompt = defaultdict(list)
    for r in records:
        if r["status"] == "ok":
            by_prompt[(r["category"], r["prompt_key"])].append(r[f"spec_{metric}"])
    values = [float(np.mean(by_prompt[k])) for k in sorted(by_prompt)]
    return float(np.mean(values)), bootstrap([(v, 1.0) for v in values])


def expected_headline(records: list[dict]) -> tuple[float, list[float]]:
    pairs = per_prompt(records, lambda r: r["completion_tokens"])
    return sum(p[0] for p in pairs) / sum(p[1] for p in pairs), bootstrap(pairs)


def test_means_and_intervals_are_those_of_what_the_server_returned_on_the_heldout_prompts(published, tmp_path, capsys):
    with speculative(SPEC_A) as a:
        assert evaluate("--output", str(published), "--sglang-url", a.url, "--eval-id", "plain") == 0
        sent = a.stats()["generations"]
    printed = capsys.readouterr().out
    results, records = results_of(published, "plain")
    held = heldout_prompt_ids(published)
    assert sent == len(records) == len(held) > 10
    # exactly the held-out prompts, which no export holds
    assert {r["prompt_id"]: r["category"] for r in records} == held
    run_export(
        LocalOutputRoot(str(published)), ExportOptions(format="jsonl", to=str(tmp_path / "x.jsonl"), run_id="r1")
    )
    exported = {json.loads(line)["sample_id"] for line in (tmp_path / "x.jsonl").read_text().splitlines()}
    data = [pq.read_table(p).to_pylist() for p in published.glob("data/category=*/run=r1/*.parquet")]
    assert not {r["prompt_id"] for rows in data for r in rows if r["sample_id"] in exported} & set(held)
    # what each request's server returned is known from the request alone
    for r in records:
        expected = spec_metrics(SPEC_A, r["sampling_seed"], r["completion_tokens"])
        assert {k: r[k] for k in expected} == expected and r["status"] == "ok"
    # the contract's keys, and the numbers recomputed from the records independently
    assert results["schema"] == "eagle-datagen/evaluation/v1" and results["label"] == "drafter-new"
    assert results["eval_id"] == "plain"
    for category in ("chat", "math"):
        block = results["categories"][category]
        mine = [r for r in records if r["category"] == category]
        assert (block["requests"], block["failed"]) == (len(mine), 0)
        assert block["output_tokens"] == sum(r["completion_tokens"] for r in mine)
        value, ci = expected_headline(mine)  # the cards' figure: output tokens / verify steps
        assert block["accept_length_total"]["value"] == pytest.approx(value, rel=1e-12)
        assert block["accept_length_total"]["ci95"] == pytest.approx(ci, rel=1e-9)
        assert block["accept_length_total"]["n"] == block["prompts"] == len(mine)
        without = per_prompt(mine, lambda r: r["spec_num_correct_drafts"])
        no_prefill = block["accept_length_no_prefill"]
        assert no_prefill["value"] == pytest.approx(1 + sum(p[0] for p in without) / sum(p[1] for p in without))
        assert no_prefill["ci95"] == pytest.approx(bootstrap(without, offset=1.0), rel=1e-9)
        assert 1.0 <= no_prefill["ci95"][0] <= no_prefill["ci95"][1] <= 4.0  # 3 steps: at most 4 by construction
        assert no_prefill["value"] < block["accept_length_total"]["value"]  # the prefill's token left out
        for metric in ("accept_length", "accept_rate"):
            mean, ci = expected_block(mine, metric)
            assert block[metric]["mean"] == pytest.approx(mean, rel=1e-12)
            assert block[metric]["ci95"] == pytest.approx(ci, rel=1e-9)
        assert block["verify_steps"]["total"] == sum(r["spec_verify_ct"] for r in mine)
        assert sum(block["correct_drafts_histogram"]["counts"]) == block["verify_steps"]["total"]
    assert results["overall"]["accept_length"]["mean"] == pytest.approx(expected_block(records, "accept_length")[0])
    assert results["overall"]["accept_length_total"]["value"] == pytest.approx(expected_headline(records)[0])
    assert results["headline"] == "accept_length_total" and results["intervals"]["resamples"] == 2000
    keys = ("categories", "overall", "modes", "categories_by_mode")
    assert summarize(records) == {k: results[k] for k in keys}  # the records say it all
    # what was measured with, beside the numbers
    server = results["deployment"]["servers"][0]
    assert server["speculative"]["speculative_algorithm"] == "EAGLE3"
    assert server["speculative"]["speculative_num_steps"] == 3 and server["speculative"]["speculative_eagle_topk"] == 1
    assert server["speculative"]["speculative_num_draft_tokens"] == 4 and server["weight_version"] == "default"
    assert results["sampling"]["math"]["max_new_tokens"] == 400 and results["prompts"]["source"] == "heldout"
    report = published / "evaluations" / results["report"]["key"]
    assert sha256_hex(report.read_bytes()) == results["report"]["sha256"] and "<img" in report.read_text()
    assert not (published / "evaluations/eval=plain").exists()  # the work files are gone
    assert "chat" in printed and "accept length" in printed and "eval=plain.json" in printed
    chat_line = next(line for line in printed.splitlines() if line.startswith("chat "))
    headline = results["categories"]["chat"]["accept_length_total"]
    assert f"{headline['value']:.3f} [{headline['ci95'][0]:.3f}, {headline['ci95'][1]:.3f}]" in chat_line


def test_a_server_without_a_drafter_is_refused_in_one_line_before_any_request(published, capsys):
    with SimServerThread(SimConfig().with_profile("instant")) as plain:
        assert evaluate("--output", str(published), "--sglang-url", plain.url, "--eval-id", "refused") == 1
        assert plain.stats()["requests"]["total"] == 0  # no /generate
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (
        f"eagle-datagen: error: {plain.url}: not a speculative server (speculative_algorithm is None in "
        "/server_info): start SGLang with --speculative-algorithm EAGLE3 --speculative-draft-model-path ..."
    )
    assert not (published / "evaluations/eval=refused.json").exists()


def test_a_server_whose_tokenizer_cannot_be_asked_is_refused_naming_the_setting_and_measured_with_it(
    published, capsys
):
    config = dataclasses.replace(
        SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant"), speculative=SPEC_A, tokenize_api="none"
    )
    with SimServerThread(config) as a:
        assert evaluate("--output", str(published), "--sglang-url", a.url, "--eval-id", "no-route") == 1
        assert a.stats()["requests"]["total"] == 0  # no /generate
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert "has no /v1/tokenize route (404)" in error and "--allow-unchecked-tokenizer" in error, error
        assert evaluate("--output", str(published), "--sglang-url", a.url, "--eval-id", "unchecked",
                        "--allow-unchecked-tokenizer") == 0  # fmt: skip
    results, records = results_of(published, "unchecked")
    assert records and all(r["status"] == "ok" for r in records)


def test_failed_requests_are_retried_or_counted_never_averaged_in(published):
    with speculative(SPEC_A, error_503=0.3) as a:
        assert evaluate("--output", str(published), "--sglang-url", a.url, "--eval-id", "retried") == 0
        assert (
            evaluate("--output", str(published), "--sglang-url", a.url, "--eval-id", "counted", "--max-attempts", "1")
            == 0
        )
    retried, _ = results_of(published, "retried")
    assert retried["overall"]["failed"] == 0  # transient: sent again until answered
    results, records = results_of(published, "counted")
    failed = [r for r in records if r["status"] == "failed"]
    assert failed and results["overall"]["failed"] == len(failed) == results["overall"]["requests"] - sum(
        r["status"] == "ok" for r in records
    )
    assert results["overall"]["failures"] == {"http_503": len(failed)}
    for category, block in results["categories"].items():
        mine = [r for r in records if r["category"] == category]
        assert block["requests"] == len(mine)
        assert block["accept_length"]["mean"] == pytest.approx(expected_block(mine, "accept_length")[0])
        assert block["prompts"] == len({r["prompt_key"] for r in mine if r["status"] == "ok"})
    assert retried["overall"]["accept_length"] != results["overall"]["accept_length"]


def test_two_drafters_compare_prompt_for_prompt_live_or_against_a_baseline(published, tmp_path):
    with speculative(SPEC_A) as a, speculative(SPEC_B) as b:
        assert (
            evaluate("--output", str(published), "--sglang-url", a.url, "--compare-url", b.url, "--eval-id", "ab") == 0
        )
        assert evaluate("--output", str(published), "--sglang-url", b.url, "--eval-id", "b") == 0
        baseline = str(published / "evaluations/eval=b.json")
        assert (
            evaluate("--output", str(published), "--sglang-url", a.url, "--baseline", baseline, "--eval-id", "ab2") == 0
        )
        assert (
            evaluate(
                "--output",
                str(published),
                "--sglang-url",
                a.url,
                "--baseline",
                baseline,
                "--seed",
                "1",
                "--eval-id",
                "x",
            )
            == 1
        )  # other seeds: other requests, nothing to pair
    live, records = results_of(published, "ab")
    comparison = live["comparison"]
    assert comparison["label"] == "drafter-old" and comparison["source"] == "compare_url"
    for category, block in comparison["categories"].items():
        prompts = live["categories"][category]["prompts"]
        assert block["paired_prompts"] == prompts and block["only_a"] == block["only_b"] == 0
        diff = block["accept_length_diff"]
        assert diff["ci95"][0] > 0  # the better drafter wins on these prompts, with its interval clear of 0
        a_values = {r["prompt_key"]: r["spec_accept_length"] for r in records if r["side"] == "A"}
        b_values = {r["prompt_key"]: r["spec_accept_length"] for r in records if r["side"] == "B"}
        keys = [r["prompt_key"] for r in records if r["side"] == "A" and r["category"] == category]
        assert diff["mean"] == pytest.approx(np.mean([a_values[k] - b_values[k] for k in keys]))
        assert (
            comparison["results"]["categories"][category]["accept_length"]["mean"]
            < (live["categories"][category]["accept_length"]["mean"])
        )
    against, _ = results_of(published, "ab2")
    assert against["comparison"]["source"] == "baseline" and against["comparison"]["baseline"]["eval_id"] == "b"
    for category, block in against["comparison"]["categories"].items():  # the same requests: the same pairs
        assert block["accept_length_diff"] == comparison["categories"][category]["accept_length_diff"]
    assert {s["url"] for s in live["comparison"]["deployment"]["servers"]} == {b.url}


def test_prompt_sources_and_a_results_file_of_ones_own(tmp_path):
    records = [user_record(f"tell me about {i}", category="chat") for i in range(30)]
    records.append({"category": "chat", "messages": []})  # rejected with its reason, not evaluated
    src = write_jsonl(tmp_path / "p.jsonl", records)
    to = tmp_path / "results" / "mine.json"
    with speculative(SPEC_A) as a:
        assert (
            evaluate("--prompts", str(src), "--sglang-url", a.url, "--to", str(to), "--requests-per-prompt", "2") == 0
        )
    results = json.loads(to.read_text())
    assert results["prompts"]["source"] == "prompts" and results["overall"]["requests"] == 60
    assert results["categories"]["chat"]["prompts"] == 30
    assert (to.parent / results["records"]["key"]).exists() and (to.parent / results["report"]["key"]).exists()
    rejects = (to.parent / results["rejects"]["key"]).read_text().splitlines()
    assert len(rejects) == 1 and json.loads(rejects[0])["reason"] == "empty_messages"


def test_each_prompt_is_evaluated_in_its_mode_and_the_results_are_per_mode(tmp_path):
    """A run with a thinking/instant mix: the held-out prompts keep the mode they were generated in (their stored
    ids, instant ones ending <think></think>), each mode sampled as the profile recommends it, and the results
    hold a block per mode and per category and mode; --prompts with --mode instant renders every prompt instant."""
    records = [user_record(f"mode {i}: " + "word " * (i % 11), category="chat") for i in range(60)]
    src = write_jsonl(tmp_path / "prompts.jsonl", records)
    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        options = run_options(tmp_path, [sim.url], run_id="m1", heldout_fraction=0.5)
        options = dataclasses.replace(
            options,
            prompts=dataclasses.replace(options.prompts, prompts=[str(src)]),
            sampling=dataclasses.replace(options.sampling, mode="mix", instant_fraction=0.5),
        )
        run_generation(options)
    root = tmp_path / "out"
    rows = [r for p in root.glob("data/category=*/run=m1/*.parquet") for r in pq.read_table(p).to_pylist()]
    held = {r["prompt_id"]: r for r in rows if r["heldout"]}
    assert {r["mode"] for r in held.values()} == {"thinking", "instant"}
    with speculative(SPEC_A) as a:
        assert evaluate("--output", str(root), "--sglang-url", a.url, "--eval-id", "modes") == 0
        results, measured = results_of(root, "modes")
        page = (root / "evaluations" / results["report"]["key"]).read_text()
        assert "Per mode" in page and "chat · instant" in page
        assert {r["prompt_id"]: r["mode"] for r in measured} == {p: r["mode"] for p, r in held.items()}
        by_mode = {mode: [r for r in measured if r["mode"] == mode] for mode in ("thinking", "instant")}
        for mode, block in results["modes"].items():
            assert block["requests"] == len(by_mode[mode]) > 0
            assert block["accept_length"]["mean"] == pytest.approx(expected_block(by_mode[mode], "accept_length")[0])
        assert results["categories_by_mode"]["chat"]["instant"]["requests"] == len(by_mode["instant"])
        assert results["sampling_by_mode"]["chat"]["instant"]["temperature"] == 0.6  # the profile's, per mode
        assert results["sampling_by_mode"]["chat"]["thinking"]["temperature"] == 1.0
        to = tmp_path / "instant.json"
        assert evaluate("--prompts", str(src), "--sglang-url", a.url, "--mode", "instant", "--to", str(to)) == 0
    results = json.loads(to.read_text())
    assert set(results["modes"]) == {"instant"} and results["modes"]["instant"]["requests"] == 60
    stored = pq.read_table(to.parent / results["records"]["key"]).to_pylist()
    assert {r["mode"] for r in stored} == {"instant"}


def test_an_ab_with_nothing_measured_on_b_exits_1_naming_why(published, capsys):
    """B never answers (every request 503, one attempt each): the results are written, and the command fails."""
    with speculative(SPEC_A) as a, speculative(SPEC_B, error_503=1.0) as b:
        args = ("--output", str(published), "--sglang-url", a.url, "--compare-url", b.url, "--max-attempts", "1")
        assert evaluate(*args, "--eval-id", "b-silent") == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    results, records = results_of(published, "b-silent")
    n = sum(r["side"] == "B" for r in records)
    assert error == (
        f"eagle-datagen: error: evaluation b-silent: deployment B (drafter-old) measured nothing: {n} requests, "
        f"{n} failed (http_503 x{n}), 0 answered without speculative metrics "
        f"({published / 'evaluations/eval=b-silent.json'} counts them): check B's endpoints or the baseline and rerun"
    )
    assert results["comparison"]["overall"]["paired_prompts"] == 0 and results["overall"]["measured"] > 0


def test_a_baseline_that_shares_no_prompt_is_refused_before_any_request(published, tmp_path, capsys):
    records = [user_record(f"unrelated {i}", category="chat") for i in range(12)]
    src = write_jsonl(tmp_path / "other.jsonl", records)
    with speculative(SPEC_B) as b:
        assert evaluate("--prompts", str(src), "--sglang-url", b.url, "--to", str(tmp_path / "other.json")) == 0
        sent = b.stats()["generations"]
        assert evaluate("--output", str(published), "--sglang-url", b.url, "--baseline",
                        str(tmp_path / "other.json"), "--eval-id", "nothing-shared") == 1  # fmt: skip
        assert b.stats()["generations"] == sent  # refused before any /generate
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "shares no prompt with this evaluation's" in error and "nothing would pair" in error, error
    assert not (published / "evaluations/eval=nothing-shared.json").exists()


def test_a_baseline_measured_otherwise_is_refused_unless_the_difference_is_accepted_and_recorded(published, capsys):
    other_target = dataclasses.replace(SimConfig().with_profile("instant"), speculative=SPEC_B, weight_version="v2")
    five_steps = dataclasses.replace(SPEC_B, num_steps=5, num_draft_tokens=6)
    with SimServerThread(other_target) as b, speculative(five_steps) as b5, speculative(SPEC_A) as a:
        assert evaluate("--output", str(published), "--sglang-url", b.url, "--eval-id", "b-v2") == 0
        assert evaluate("--output", str(published), "--sglang-url", b5.url, "--eval-id", "b-5") == 0
        sent = a.stats()["generations"]
        for baseline, what in (("b-v2", "weight version: A default, B v2"), ("b-5", "speculative_num_steps")):
            location = str(published / f"evaluations/eval={baseline}.json")
            assert evaluate("--output", str(published), "--sglang-url", a.url, "--baseline", location) == 1
            error = capsys.readouterr().err.strip().splitlines()[-1]
            assert f"baseline {location} was measured otherwise than this evaluation" in error, error
            assert what in error and "--allow-comparison-mismatch" in error, error
        assert a.stats()["generations"] == sent  # refused before any /generate
        location = str(published / "evaluations/eval=b-v2.json")
        assert evaluate("--output", str(published), "--sglang-url", a.url, "--baseline", location,
                        "--allow-comparison-mismatch", "--eval-id", "accepted") == 0  # fmt: skip
        # a live B on another weight version: the same check
        assert evaluate("--output", str(published), "--sglang-url", a.url, "--compare-url", b.url) == 1
        assert "weight version: A default, B v2" in capsys.readouterr().err
    results, _ = results_of(published, "accepted")
    assert results["comparison"]["accepted_differences"] == ["weight version: A default, B v2"]
    page = (published / "evaluations" / results["report"]["key"]).read_text()
    assert "weight version: A default, B v2" in page
