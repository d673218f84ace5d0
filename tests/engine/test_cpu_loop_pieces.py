"""The CPU loop's pieces without SGLang: the meta_info reader against a stand-in /generate that answers known
per-request spec metrics (means and intervals equal those computed from what it returned, failures counted and
never averaged in), the switch to the evaluate command, the held-out split, the table, and the process-tree
usage the loop reports."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from eagle_datagen_stack import acceptance
from eagle_datagen_stack.acceptance import EvalRequest, mean_ci95, read_acceptance, t975
from eagle_datagen_stack.cpu_loop import LoopResult, LoopSettings, format_table, split_prompts
from eagle_datagen_stack.process_tree import TreeUsage

# prompt id (its first token) -> the spec_accept_length the server answers; None: a 500; 0: an answer of one token
# (the prefill's), which has no verify step and no spec_* keys
ANSWERS = {1: 3.5, 2: 2.0, 3: 4.0, 4: 1.0, 5: 1.5, 6: None, 7: 0}


class _Generate(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        value = ANSWERS[body["input_ids"][0]]
        if value is None:
            self.send_response(500)
            self.end_headers()
            return
        meta = {"completion_tokens": body["sampling_params"]["max_new_tokens"], "spec_accept_length": value,
                "spec_accept_rate": (value - 1) / 3, "spec_verify_ct": 4}
        if value == 0:
            meta = {"completion_tokens": 1}
        data = json.dumps({"output_ids": [], "meta_info": meta}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Generate)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_reader_aggregates_what_the_server_answered_per_category(server, tmp_path):
    prompts = [("math", [1, 9]), ("math", [2]), ("math", [3]), ("math", [7]), ("code", [4]), ("code", [5]),
               ("code", [6])]
    report = read_acceptance(server, prompts, EvalRequest(tmp_path / "p.jsonl", "tok", max_new_tokens=8), "A")
    assert report["schema"] == "eagle-datagen/evaluation/v1" and report["label"] == "A"
    in_math, in_code = report["categories"]["math"], report["categories"]["code"]
    assert (in_math["requests"], in_math["failed"], in_math["unverified"], in_math["output_tokens"]) == (4, 0, 1, 25)
    # the 500 is counted, never averaged in
    assert (in_code["requests"], in_code["failed"], in_code["unverified"], in_code["output_tokens"]) == (3, 1, 0, 16)
    values = [3.5, 2.0, 4.0]  # mean 3.1667, standard error 0.6009, t(0.975, 2 df) = 4.303 (tables)
    assert in_math["accept_length"]["mean"] == pytest.approx(statistics.fmean(values))
    assert in_math["accept_length"]["ci95"] == pytest.approx([3.1667 - 2.5857, 3.1667 + 2.5857], abs=1e-3)
    assert in_code["accept_length"]["mean"] == pytest.approx(1.25)
    assert in_math["accept_rate"]["mean"] == pytest.approx(statistics.fmean((v - 1) / 3 for v in values))
    assert report["overall"]["requests"] == 7 and report["overall"]["failed"] == 1
    assert report["overall"]["accept_length"]["mean"] == pytest.approx(statistics.fmean([3.5, 2, 4, 1, 1.5]))
    records = report["records"]  # kept, so that every figure can be recomputed from them
    assert [r["spec_accept_length"] for r in records if "spec_accept_length" in r] == [3.5, 2.0, 4.0, 1.0, 1.5]
    assert [r["failed"] for r in records] == [False] * 6 + [True]


def test_intervals_match_student_t_and_degenerate_cases():
    # t(0.975) from tables: 1 df 12.706, 35 df 2.030, 40 df 2.021, 60 df 2.000, 120 df 1.980
    for degrees, quantile in ((1, 12.706), (35, 2.030), (40, 2.021), (60, 2.000), (120, 1.980)):
        assert t975(degrees) == pytest.approx(quantile, abs=1.5e-3)
    values = [1.0, 1.5, 3.0, 3.5, 4.0, 2.5] * 6
    half = 2.030 * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.fmean(values)
    assert mean_ci95(values)["ci95"] == pytest.approx([mean - half, mean + half], abs=1e-3)
    assert mean_ci95([4.0, 4.0, 4.0]) == {"mean": 4.0, "ci95": [4.0, 4.0]}
    assert mean_ci95([2.0]) == {"mean": 2.0, "ci95": [2.0, 2.0]}
    assert mean_ci95([]) == {"mean": None, "ci95": None}


def test_the_evaluate_command_is_used_once_it_exists(monkeypatch, tmp_path):
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        if "--to" in command:
            (tmp_path / "r.json").write_text(json.dumps({"schema": acceptance.SCHEMA, "label": "B"}))

        class Done:
            returncode, stderr = 0, ""
        return Done()

    monkeypatch.setattr(acceptance.subprocess, "run", fake_run)
    report = acceptance.evaluate_drafter("http://x", EvalRequest(tmp_path / "p.jsonl", "tok", True), "B",
                                         tmp_path / "r.json")
    assert report["label"] == "B"
    assert calls[0][-2:] == ["evaluate", "--help"]
    command = calls[1]
    for flag, value in (("--sglang-url", "http://x"), ("--prompts", str(tmp_path / "p.jsonl")), ("--label", "B"),
                        ("--to", str(tmp_path / "r.json")), ("--tokenizer", "tok")):
        assert command[command.index(flag) + 1] == value
    assert "--trust-remote-code" in command


def test_without_the_command_the_reader_measures(monkeypatch, tmp_path):
    class Missing:
        returncode, stderr = 2, "invalid choice: 'evaluate'"

    monkeypatch.setattr(acceptance.subprocess, "run", lambda command, **kwargs: Missing())
    monkeypatch.setattr(acceptance, "tokenized_prompts", lambda request, work: [("math", [1])])
    monkeypatch.setattr(acceptance, "read_acceptance", lambda url, prompts, request, label: {"label": label,
                                                                                           "prompts": prompts})
    report = acceptance.evaluate_drafter("http://x", EvalRequest(tmp_path / "p.jsonl", "tok"), "C", tmp_path / "r.json")
    assert report["prompts"] == [("math", [1])]
    assert json.loads((tmp_path / "r.json").read_text())["label"] == "C"


def test_held_out_prompts_are_stable_and_never_trained_on(tmp_path):
    source = tmp_path / "prompts"
    source.mkdir()
    rows = [{"category": "math", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(10)]
    (source / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = LoopSettings(work=tmp_path / "a", prompts=source, categories=("math",), heldout_per_category=3)
    (tmp_path / "a").mkdir()
    training, heldout = (p.read_text().splitlines() for p in split_prompts(settings))
    assert len(heldout) == 3 and len(training) == 7 and not set(heldout) & set(training)
    more = rows + [{"category": "math", "messages": [{"role": "user", "content": "a new one"}]}]
    (source / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(more)))
    (tmp_path / "b").mkdir()
    _, again = (p.read_text().splitlines() for p in split_prompts(LoopSettings(
        work=tmp_path / "b", prompts=source, categories=("math",), heldout_per_category=3)))
    assert set(again) - set(heldout) <= {json.dumps(more[-1])}  # order does not matter; a new prompt may enter


def test_table_has_a_row_per_category_and_a_column_per_drafter(tmp_path):
    def report(mean):
        cell = {"requests": 6, "failed": 0, "accept_length": {"mean": mean, "ci95": [mean - 0.1, mean + 0.1]}}
        return {"categories": {"chat": cell, "math": cell}, "overall": {**cell, "requests": 12}}

    result = LoopResult({"random": report(1.05), "off-policy": report(1.2), "on-policy": report(3.9)},
                        {"train": 60.0}, {"train": 70.0}, 3 * 2**30, LoopSettings(work=tmp_path))
    lines = format_table(result).splitlines()
    assert lines[1].split() == ["category", "(prompts)", "random", "off-policy", "on-policy"]
    assert lines[2].startswith("chat (6)") and "3.90 [3.80, 4.00]" in lines[2] and "1.05 [0.95, 1.15]" in lines[2]
    assert lines[4].startswith("overall (12)")
    assert "peak memory 3.0 GiB" in lines[-1]


def test_tree_usage_counts_a_child_that_has_ended():
    burn = ("import time\nheld = b'x' * (80 * 2**20)\nend = time.process_time() + 1.0\n"
            "while time.process_time() < end: pass")
    with TreeUsage(every_s=0.1) as usage:
        before = usage.cpu_seconds()
        subprocess.run([sys.executable, "-c", burn], check=True)
        time.sleep(0.2)
        spent = usage.cpu_seconds() - before
    assert 0.8 <= spent <= 3.0, spent  # the child's second (the last tenth of a second may be missed)
    assert usage.peak_bytes >= 80 * 2**20
