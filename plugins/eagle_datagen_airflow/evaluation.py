"""The evaluate DAG's task bodies: the run's params and connection in, the package's evaluation steps
(eagle_datagen/evaluation/stage.py) called with plain JSON, JSON out.

The settings come from the trigger form (settings.EVALUATE_SETTINGS' params) over the SGLang connection's extra
(tokenizer, profile, trust_remote_code; its URLs when the form names no endpoints), the recipe (its per-category
sampling, as the category DAGs sample) and the DAG run (the evaluation's id). XComs carry settings and the
deployments' facts, never credentials.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.access import KeyRefused
from eagle_datagen_airflow.deployment import object_store, sglang_deployment, sglang_key
from eagle_datagen_airflow.runs import refuse_unknown_conf, sanitize

log = logging.getLogger(__name__)


def eval_id_for(dag_run_id: str) -> str:
    """The evaluation's id of a DAG run: the same for every task and try of it."""
    return sanitize(dag_run_id)


def evaluate_config(recipe: str, eval_id: str, params: Mapping[str, Any], deployment: Any) -> dict[str, Any]:
    """The evaluation's settings as JSON: the form's params over the connection's extra (settings.from_form and
    from_connection on the evaluate table); an empty list of endpoints in the form means the connection's."""
    from eagle_datagen import settings
    from eagle_datagen.evaluation.options import EvaluateConfig  # not at parse time: it pulls in pyarrow

    table = settings.EVALUATE_SETTINGS
    form = settings.from_form(dict(params), table)
    if not form.get("sglang_urls"):
        form.pop("sglang_urls", None)
    values = settings.from_connection(dataclasses.asdict(deployment), table) | form
    return EvaluateConfig(**values, recipe=recipe, eval_id=eval_id, front_end="airflow").to_dict()


def prepare(recipe: str, params: Mapping[str, Any], dag: Any, dag_run: Any) -> list[dict[str, Any]]:
    """Check the settings and every endpoint, choose the prompt set; one work item per category to measure (the
    category, the settings and what prepare found), one task each."""
    from eagle_datagen.evaluation.stage import prepare_step

    try:  # a bad setting or an endpoint without a drafter is terminal
        refuse_unknown_conf(dag_run.conf, dag.params)
        deployment = sglang_deployment(params["sglang_conn_id"])
        config = evaluate_config(recipe, eval_id_for(dag_run.run_id), params, deployment)
        with object_store(params["aws_conn_id"]), sglang_key(params.get("sglang_conn_id")):
            prepared = prepare_step(config)
    except ConfigError as exc:
        raise AirflowFailException(str(exc)) from None
    log.info("evaluation %s: categories %s", prepared["eval_id"], prepared["categories"])
    return [{"category": c, "config": config, "prepared": prepared} for c in prepared["categories"]]


def measure(work: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """One category's requests to every deployment (a retry sends them again)."""
    from eagle_datagen.evaluation.stage import measure_step

    category = work["category"]
    with object_store(params["aws_conn_id"]), sglang_key(params.get("sglang_conn_id")):
        try:
            measured = measure_step(work["config"], work["prepared"], [category])
        except KeyRefused as exc:  # the key was changed since prepare: a retry would be refused too
            raise AirflowFailException(str(exc)) from None
    return measured["categories"][category] | {"category": category}


def finish(work: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers, the records file, the report (the DAG run's Report tab) and the JSON, written last."""
    from eagle_datagen.evaluation.stage import finish_step

    with object_store(params["aws_conn_id"]):
        done = finish_step(work["config"], work["prepared"])
    results = done["results"]
    for category, block in results["categories"].items():
        stat = block["accept_length_total"]  # output tokens / verify steps, as drafter cards give it
        log.info("%s: accept length %s %s over %d prompts", category, stat["value"], stat["ci95"], block["prompts"])
    return {
        "eval_id": done["eval_id"],
        "json": done["json"],
        "report": done["report"],
        "accept_length": {c: b["accept_length"] for c, b in results["categories"].items()},
    }
