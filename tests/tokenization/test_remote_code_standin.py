"""The Kimi-K2.5 stand-in as the real folder is shaped (remote code over tiktoken): loaded only through its own
code with --trust-remote-code, refused in one line without it (although transformers would silently use its
built-in kimi_k25 class), one line when the code cannot import, and a provenance that changes with the template,
tiktoken.model or the code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.tokenization.loader import load_tokenizer
from standin_variants import break_import, copy_standin, import_a_missing_name, swap_byte_ranks

from conftest import REPO, user_record, write_jsonl


def tokenize_cli(tmp_path, tokenizer: str, *extra: str) -> subprocess.CompletedProcess:
    src = write_jsonl(tmp_path / "p.jsonl", [user_record("What is 2+2?")])
    args = ["tokenize", "--prompts", str(src), "--tokenizer", tokenizer, "--output", str(tmp_path / "out"), *extra]
    return subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    [line] = [line for line in result.stderr.splitlines() if "error:" in line]
    return line


def test_without_the_flag_refused_in_one_line_although_transformers_has_a_builtin_class(standin_dir, tmp_path):
    from transformers import AutoTokenizer

    lookalike = AutoTokenizer.from_pretrained(str(standin_dir))  # what transformers does on its own: no error
    assert type(lookalike).__name__ != "TikTokenTokenizer"
    result = tokenize_cli(tmp_path, str(standin_dir))
    line = error_line(result)
    assert str(standin_dir) in line and "tokenization_kimi.TikTokenTokenizer" in line and "--trust-remote-code" in line
    assert not (tmp_path / "out").exists()


def test_with_the_flag_it_tokenizes_through_its_own_code(standin_dir, tmp_path):
    import json

    result = tokenize_cli(tmp_path, "standin:kimi-k2.5", "--trust-remote-code")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(next((tmp_path / "out").rglob("*summary*.json")).read_text())
    tokenizer = summary["tokenizer"]
    assert tokenizer["tokenizer_class"] == "TikTokenTokenizer"
    assert tokenizer["tokenizer_module"].startswith("transformers_modules.")
    assert tokenizer["remote_code"] == "tokenization_kimi.TikTokenTokenizer"
    assert set(tokenizer["tokenizer_files_sha256"]) == {
        "tiktoken.model",
        "tokenization_kimi.py",
        "tool_declaration_ts.py",
    }


def test_the_tiktoken_fast_path_and_the_own_call_write_the_same_parts(tmp_path):
    """The default (the tokenizer's own call) and `--tiktoken-fast-path` write the same bytes for the stand-in; the
    opt-in is said and recorded (the manifest's provenance says encode_path)."""
    rows = [user_record(f"question {i}: 多少 is {i}+{i}?\tand a tab") for i in range(70)]
    rows.append(user_record("x" + "y" * 30_000))  # a run the remote code cuts: its own call on both sides
    src = write_jsonl(tmp_path / "p.jsonl", rows)
    parts = {}
    for name, extra in (("fast", ["--tiktoken-fast-path"]), ("own", [])):
        out = tmp_path / name
        args = ["tokenize", "--prompts", str(src), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code",
                "--max-prompt-tokens", "100000", "--output", str(out), *extra]  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "eagle_datagen.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=300
        )
        assert result.returncode == 0, result.stderr[-2000:]
        said = "as opted in (tiktoken_fast_path)" if name == "fast" else "encoded by the tokenizer's own call"
        assert said in result.stderr
        parts[name] = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.parquet")}
    assert parts["fast"] == parts["own"] and len(parts["fast"]) == 1


def test_remote_code_that_cannot_import_gives_one_line(standin_dir, tmp_path):
    folder = copy_standin(standin_dir, tmp_path / "tok")
    break_import(folder)
    line = error_line(tokenize_cli(tmp_path, str(folder), "--trust-remote-code"))
    assert "tokenization_kimi.TikTokenTokenizer" in line and "pip install eagle_missing_tokenizer_dep" in line


def test_remote_code_importing_a_name_transformers_lacks_names_it_and_the_version(standin_dir, tmp_path):
    import transformers

    folder = copy_standin(standin_dir, tmp_path / "tok-k2-era")
    import_a_missing_name(folder)  # Moonshot's K2-era import, gone in transformers 5
    line = error_line(tokenize_cli(tmp_path, str(folder), "--trust-remote-code"))
    assert "imports bytes_to_unicode from transformers.models.gpt2.tokenization_gpt2" in line, line
    assert f"the installed transformers {transformers.__version__} does not have" in line
    assert "pip install" not in line  # transformers is installed: installing it again would not help


@pytest.mark.parametrize("change", ["template", "tiktoken.model", "tool encoder"])
def test_a_tampered_tokenizer_changes_the_provenance(standin_dir, tmp_path, kimi_profile, loaded_tokenizer, change):
    folder = copy_standin(standin_dir, tmp_path / "tok")
    if change == "template":
        template = (folder / "chat_template.jinja").read_text()
        (folder / "chat_template.jinja").write_text(template.replace("{{ tools_ts_str }}", "{{ tools_ts_str }}\n"))
    elif change == "tiktoken.model":
        swap_byte_ranks(folder)
    else:
        code = (folder / "tool_declaration_ts.py").read_text()
        (folder / "tool_declaration_ts.py").write_text(code.replace("namespace functions", "namespace tools"))
    before = loaded_tokenizer.provenance()
    after = load_tokenizer(str(folder), kimi_profile, trust_remote_code=True).provenance()
    assert after["tokenizer_sha256"] != before["tokenizer_sha256"]
    changed = {k for k in ("chat_template_sha256", "rendered_template_sha256") if after[k] != before[k]}
    files = {k for k, v in after["tokenizer_files_sha256"].items() if before["tokenizer_files_sha256"][k] != v}
    assert {
        "template": ({"chat_template_sha256", "rendered_template_sha256"}, set()),
        "tiktoken.model": (set(), {"tiktoken.model"}),
        "tool encoder": ({"rendered_template_sha256"}, {"tool_declaration_ts.py"}),
    }[change] == (changed, files)


def test_an_auto_map_naming_a_missing_class_gives_one_line(standin_dir, tmp_path, kimi_profile):
    import json

    folder = copy_standin(standin_dir, tmp_path / "tok-missing-class")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"]["AutoTokenizer"][0] = "tokenization_kimi.OtherTokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        load_tokenizer(str(folder), kimi_profile, trust_remote_code=True)
    line = str(info.value)
    assert "\n" not in line and "its code (tokenization_kimi.OtherTokenizer) fails to load: AttributeError" in line


def test_a_class_other_than_the_auto_map_one_is_refused(standin_dir, tmp_path, kimi_profile):
    """The module's `TikTokenTokenizer` is bound to another class (a look-alike subclass): transformers loads that
    class, and the loader refuses it, naming both."""
    folder = copy_standin(standin_dir, tmp_path / "tok-other-class")
    code = folder / "tokenization_kimi.py"
    code.write_text(
        code.read_text()
        + "\n\nclass LookalikeTokenizer(TikTokenTokenizer):\n    pass\n\n\nTikTokenTokenizer = LookalikeTokenizer\n"
    )
    with pytest.raises(ConfigError) as info:
        load_tokenizer(str(folder), kimi_profile, trust_remote_code=True)
    assert str(info.value) == (
        f"tokenizer {folder} maps AutoTokenizer to tokenization_kimi.TikTokenTokenizer, but transformers loaded "
        "LookalikeTokenizer: the folder's own code must tokenize (check its auto_map)"
    )


def test_a_look_alike_of_a_remote_code_reference_tokenizer_is_flagged(kimi_profile, caplog):
    """The kimi-k2.5 profile says its reference tokenizer is remote code: a fast tokenizer.json loads, with a
    warning; the remote-code one without."""
    assert kimi_profile.reference_tokenizer == "remote_code"
    with caplog.at_level("WARNING", logger="eagle_datagen.tokenization.loader"):
        load_tokenizer("standin:kimi-k2.5-fast", kimi_profile)
        load_tokenizer("standin:kimi-k2.5", kimi_profile, trust_remote_code=True)
    [warning] = [r.getMessage() for r in caplog.records if "is not remote code" in r.getMessage()]
    assert warning.startswith("tokenizer standin:kimi-k2.5-fast is not remote code, but moonshotai/Kimi-K2.5's own")
    assert "--trust-remote-code" in warning
