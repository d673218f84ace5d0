"""What the manifest's validation.tokenizer_check says of an endpoint checked by several preflights of one run
(a run resumed, Airflow's preflight task and each shard task): the weakest comparison any of them made, since the
run's data may come from any of its invocations."""

from __future__ import annotations

from eagle_datagen.generation.endpoint_journal import endpoint_report, record_tokenizer_check, tokenizer_checks
from eagle_datagen.storage.output_root import open_output_root


def test_the_weakest_comparison_over_the_runs_preflights_is_recorded(tmp_path):
    root = open_output_root(str(tmp_path / "out"))
    assert tokenizer_checks(root, "r") == {}
    record_tokenizer_check(root, "r", {"http://a": "messages", "http://b": "prompt"}, "preflight")
    resumed = {"http://a": "unchecked", "http://b": "messages", "http://c": "no_tokenizer"}
    record_tokenizer_check(root, "r", resumed, "run")
    record_tokenizer_check(root, "r", {"http://a": "messages"}, "run")
    assert tokenizer_checks(root, "r") == {"http://a": "unchecked", "http://b": "prompt", "http://c": "no_tokenizer"}
    assert endpoint_report(root, "r")["tokenizer_check"] == tokenizer_checks(root, "r")
    assert tokenizer_checks(root, "other") == {}
