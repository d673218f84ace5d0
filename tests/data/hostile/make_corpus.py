"""Write the hostile-input corpus next to this file, with `cases.json`, the manifest of every case.

    .venv/bin/python tests/data/hostile/make_corpus.py        # after changing a case; commit the result

Each case names its entry point (`record`: a line of records.jsonl; `source`: a prompt file; `recipe`;
`run_id`; `flag`), what must happen (`reject` with a reason, `accept`, `duplicate`, or `error` with the exit
status and a fragment of the one-line message) and why. Many files cannot be written by hand (invalid UTF-8,
compression bombs, Parquet with wrong column types), hence this script. The output is deterministic:
tests/reliability/test_hostile_inputs.py regenerates it and compares byte for byte.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the case tables beside this file, also when it is loaded by path

from record_cases import RECORDS, line  # noqa: E402
from source_cases import sources  # noqa: E402


def recipe(body: str) -> bytes:
    return body.encode("utf-8")


OK_SOURCE = "sources: [../sources/ok.jsonl]"
CHAT = f"categories:\n  chat: {{{OK_SOURCE}}}\n"
RECIPES: list[tuple[str, bytes, str, str]] = [
    (
        "unknown_key",
        recipe(f"version: 1\ncategories:\n  chat: {{{OK_SOURCE}}}\nshards: 4\n"),
        "unknown key",
        "a misspelt key is an error, not ignored",
    ),
    (
        "category_dotdot",
        recipe(f'categories:\n  "../x": {{{OK_SOURCE}}}\n'),
        "category name",
        "a category name that is a path",
    ),
    (
        "category_absolute",
        recipe(f'categories:\n  "/etc": {{{OK_SOURCE}}}\n'),
        "category name",
        "an absolute path as category",
    ),
    (
        "category_fullwidth",
        recipe(f"categories:\n  ｍａｔｈ: {{{OK_SOURCE}}}\n"),
        "category name",
        "full-width look-alike letters",
    ),
    (
        "temperature_text",
        recipe(f"defaults: {{sampling: {{temperature: hot}}}}\n{CHAT}"),
        "temperature",
        "a word where a number belongs",
    ),
    (
        "temperature_nan",
        recipe(f"defaults: {{sampling: {{temperature: .nan}}}}\n{CHAT}"),
        "temperature",
        "NaN as temperature",
    ),
    (
        "top_k_zero",
        recipe(f"categories:\n  chat: {{{OK_SOURCE}, sampling: {{top_k: 0}}}}\n"),
        "top_k",
        "top_k 0, which SGLang refuses",
    ),
    (
        "negative_cap",
        recipe(f"categories:\n  chat: {{{OK_SOURCE}, max_prompts: -1}}\n"),
        "max_prompts",
        "a negative cap",
    ),
    (
        "reject_rate_5",
        recipe(f"max_reject_rate: 5\ncategories:\n  chat: {{{OK_SOURCE}}}\n"),
        "max_reject_rate",
        "a rate above 1",
    ),
    ("version_2", recipe(f"version: 2\ncategories:\n  chat: {{{OK_SOURCE}}}\n"), "version", "an unknown version"),
    (
        "name_path",
        recipe(f'name: "../../x"\ncategories:\n  chat: {{{OK_SOURCE}}}\n'),
        "name",
        "a recipe name (part of asset URIs) that is a path",
    ),
    ("a_list", recipe("- chat\n- math\n"), "must be a YAML mapping", "a list instead of a mapping"),
    ("empty", recipe(""), "must be a YAML mapping", "an empty file"),
    (
        "python_tag",
        recipe('!!python/object/apply:os.system ["touch /tmp/eagle-datagen-pwned"]\n'),
        "not valid YAML",
        "a PyYAML code-execution tag (safe loading refuses it)",
    ),
    (
        "billion_laughs",
        recipe(
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
            f"categories:\n  chat: {{{OK_SOURCE}}}\n"
        ),
        "expands to",
        "YAML aliases that expand to half a million values",
    ),
    (
        "recursive_alias",
        recipe(f"a: &a [*a]\ncategories:\n  chat: {{{OK_SOURCE}}}\n"),
        "refers to itself",
        "a YAML alias that contains itself",
    ),
    ("deep_nesting", recipe("name: " + "[" * 5000 + "]" * 5000 + "\n"), "nested too deeply", "5000 nested lists"),
    (
        "duplicate_key",
        recipe(f"categories:\n  chat: {{{OK_SOURCE}}}\n  chat: {{sources: [../sources/x.jsonl]}}\n"),
        "appears twice",
        "a category given twice (YAML would keep the last silently)",
    ),
    ("invalid_utf8", b"categories:\n  chat: {sources: [\xff]}\n", "cannot read recipe", "a recipe that is not UTF-8"),
    (
        "missing_source",
        recipe("categories:\n  chat: {sources: [../sources/does-not-exist.jsonl]}\n"),
        "prompt source not found",
        "a source that is not there: found before the canary",
    ),
    (
        "source_nul",
        recipe('categories:\n  chat: {sources: ["../sources/ok\\0.jsonl"]}\n'),
        "prompt source",
        "a NUL byte in a source path",
    ),
    (
        "source_s3_no_bucket",
        recipe('categories:\n  chat: {sources: ["s3://"]}\n'),
        "bad prompt source",
        "an s3:// URI without a bucket",
    ),
]

RUN_IDS: list[tuple[str, str, str]] = [
    ("dotdot", "../x", "parent-folder traversal"),
    ("absolute", "/tmp/evil", "an absolute path"),
    ("percent", "%2e%2e", "URL-encoded '..'"),
    ("dots", "run.1", "a dot (manifest artifacts are named run=<id>.<name>)"),
    ("only_dots", "..", "the parent folder itself"),
    ("fullwidth", "ｒｕｎ", "full-width look-alike letters"),
    ("too_long", "r" * 129, "129 characters (limit 128)"),
    ("leading_dash", "-x", "a leading dash"),
    ("space", "a b", "a space"),
    ("newline", "a\nb", "a newline"),
    ("empty", "", "an empty id"),
    ("slash", "a/b", "a folder inside the id"),
]

# (id, extra arguments of `eagle-datagen run`, exit status, message fragment, why)
FLAGS: list[tuple[str, list[str], int, str, str]] = [
    ("categories_path", ["--categories", "../x"], 2, "bad category list", "a path as category filter"),
    ("temperature_nan", ["--temperature", "nan"], 2, "not a finite number", "NaN as temperature"),
    ("temperature_inf", ["--temperature", "inf"], 2, "not a finite number", "infinity as temperature"),
    ("top_p_zero", ["--top-p", "0"], 2, "must be in (0, 1]", "top_p 0"),
    ("top_k_zero", ["--top-k", "0"], 2, "must be -1 (off) or at least 1", "top_k 0, refused by SGLang"),
    ("reject_rate_nan", ["--max-reject-rate", "nan"], 2, "not a finite number", "NaN as a rate"),
    ("timeout_nan", ["--request-timeout", "nan"], 2, "not a finite number", "NaN as a timeout"),
    ("shard_size_zero", ["--shard-size", "0"], 2, "must be a positive integer", "empty shards"),
    ("max_new_tokens_negative", ["--max-new-tokens=-5"], 2, "must be a positive integer", "a negative length"),
    ("empty_prompts", ["--prompts", ""], 2, "names no prompt source", "an empty source would read the current folder"),
    (
        "url_with_password",
        ["--sglang-url", "http://admin:hunter2-SECRET@127.0.0.1:9"],
        1,
        "carries credentials",
        "credentials in a URL would be logged and stored in plans; the password is not echoed",
    ),
    ("url_file_scheme", ["--sglang-url", "file:///etc/passwd"], 1, "bad SGLang URL", "not an http URL"),
    ("url_bad_port", ["--sglang-url", "http://127.0.0.1:port"], 1, "bad SGLang URL", "a port that is no number"),
    ("output_no_bucket", ["--output", "s3://"], 1, "bad output root", "an s3:// root without a bucket"),
    ("output_s3_dotdot", ["--output", "s3://eagle/a/../b"], 1, "bad output root", "'..' inside an S3 prefix"),
    ("profile_passwd", ["--profile", "{corpus}/sources/passwd.txt"], 1, "profile", "a passwd file as model profile"),
]


def build(target: Path) -> list[dict[str, Any]]:
    """Write the corpus into `target`; returns the cases (also written to cases.json)."""
    for folder in ("sources", "recipes"):
        shutil.rmtree(target / folder, ignore_errors=True)
        (target / folder).mkdir(parents=True)
    cases: list[dict[str, Any]] = []

    lines = []
    for number, (case_id, value, outcome, reason, why) in enumerate(RECORDS, start=1):
        lines.append(line(value))
        case = {"id": f"record_{case_id}", "entry": "record", "line": number, "expect": outcome, "why": why}
        if reason:
            case["reason"] = reason
        cases.append(case)
    (target / "records.jsonl").write_bytes(b"\n".join(lines) + b"\n")

    for name, data, expectation, why in sources():
        (target / "sources" / name).write_bytes(data)
        if expectation["expect"] == "error":
            expectation = {**expectation, "exit": 1}
        cases.append({"id": f"source_{name}", "entry": "source", "file": f"sources/{name}", **expectation, "why": why})
    for name, data, message, why in RECIPES:
        (target / "recipes" / f"{name}.yaml").write_bytes(data)
        cases.append(
            {
                "id": f"recipe_{name}",
                "entry": "recipe",
                "file": f"recipes/{name}.yaml",
                "expect": "error",
                "exit": 1,
                "message": message,
                "why": why,
            }
        )
    for name, value, why in RUN_IDS:
        cases.append(
            {
                "id": f"run_id_{name}",
                "entry": "run_id",
                "value": value,
                "expect": "error",
                "exit": 1,
                "message": "must match [A-Za-z0-9][A-Za-z0-9_-]{0,127}",
                "why": why,
            }
        )
    for name, args, status, message, why in FLAGS:
        cases.append(
            {
                "id": f"flag_{name}",
                "entry": "flag",
                "args": args,
                "expect": "error",
                "exit": status,
                "message": message,
                "why": why,
            }
        )
    (target / "cases.json").write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return cases


if __name__ == "__main__":
    written = build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
    print(f"{len(written)} cases")
