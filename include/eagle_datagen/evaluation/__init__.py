"""Evaluation: what the data is worth, measured as the acceptance a drafter trained on it reaches on a speculative
SGLang deployment (`eagle-datagen evaluate`, the evaluate DAG; docs/internals/evaluation.md).

A stage like the others, in its own room: prompt selection (prompts.py: the output root's held-out prompts, or
`--prompts` sources), the deployments' checks (servers.py), the request loop (requests.py: generation's client and
scheduler), the per-request records (records.py), aggregation with intervals (aggregate.py, intervals.py), the
results and a baseline (results.py, place.py), the report (report.py); stage.py holds the steps both front ends run.
"""
