"""Kimi-shaped remote-code folders whose own `tokenization_kimi.py` differs from plain `tiktoken` encoding in one
realistic way each, as a next release of the real file might: Unicode normalisation in `encode`, in `_tokenize` or
set on the instance, whitespace and blank-line rules, lower chunk and run limits, characters dropped or mapped,
a digit pre-tokenizer, a changed token-to-id conversion. With each, a prompt set that exercises the difference
(TRIGGERS), placed among ordinary prompts at no fixed position.

Sample texts cannot prove two programs equal: a path checked on samples would pass some of these and write other
ids. The tests (test_own_code_variants.py) show that a default run writes each folder's own ids.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from standin_variants import add_to_class, replace_in_remote_code

ENCODE_BODY = "        assert isinstance(text, str)\n        return self._encode_text_piece(text, allow_special_tokens)"
TOKENIZE_BODY = "for i in self.encode(text)]"


def _imports(folder: Path) -> None:
    replace_in_remote_code(folder, "import os\n", "import os\nimport re\nimport unicodedata\n")


def _in_encode(expression: str) -> Callable[[Path], None]:
    """`encode` rewrites the text first (`expression` of `text`)."""

    def change(folder: Path) -> None:
        _imports(folder)
        new = f"        assert isinstance(text, str)\n        text = {expression}\n" + ENCODE_BODY.split("\n")[1]
        replace_in_remote_code(folder, ENCODE_BODY, new)

    return change


def _in_tokenize(expression: str) -> Callable[[Path], None]:
    """`_tokenize` (each piece between special tokens) rewrites the piece first."""

    def change(folder: Path) -> None:
        _imports(folder)
        replace_in_remote_code(folder, TOKENIZE_BODY, f"for i in self.encode({expression})]")

    return change


def _constant(name: str, value: str) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        code = folder / "tokenization_kimi.py"
        text = code.read_text(encoding="utf-8")
        line = next(line for line in text.splitlines() if line.startswith(f"{name} = "))
        code.write_text(text.replace(line, f"{name} = {value}", 1), encoding="utf-8")

    return change


def _normalisation_on_the_instance(folder: Path) -> None:
    _imports(folder)
    replace_in_remote_code(folder, "        self.vocab_file = vocab_file\n",
                           "        self.vocab_file = vocab_file\n        self.normalization_form = 'NFKC'\n")
    replace_in_remote_code(folder, TOKENIZE_BODY, "for i in self.encode(unicodedata.normalize("
                                                  "self.normalization_form, text))]")


def _digit_pre_tokenizer(folder: Path) -> None:
    """A pre-tokenizer step that splits numbers into single digits before BPE, as several tokenizers do."""
    _imports(folder)
    add_to_class(folder, "    def pre_tokenizer_process(self, text):\n"
                         "        return re.findall(r'\\d|\\D+', text)\n")
    replace_in_remote_code(
        folder,
        ENCODE_BODY,
        "        assert isinstance(text, str)\n"
        "        return [i for part in self.pre_tokenizer_process(text) "
        "for i in self._encode_text_piece(part, allow_special_tokens)]",
    )


def _token_to_id_remap(folder: Path) -> None:
    """`_convert_token_to_id` with an alias table: the token string of " and" converts to the id of "and"."""
    replace_in_remote_code(
        folder,
        "        return self.encoder.get(token, self.special_tokens.get(str(self.unk_token), 0))",
        "        token = {'\\u0120and': 'and'}.get(token, token)\n"
        "        return self.encoder.get(token, self.special_tokens.get(str(self.unk_token), 0))",
    )


FULLWIDTH = "{i: i - 0xFEE0 for i in range(0xFF01, 0xFF5F)}"
ZERO_WIDTH = "[\\u200b\\u200c\\u200d\\ufeff]"
CONTROL = "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]"

# name -> (the change to tokenization_kimi.py, a prompt text on which it makes other ids than plain tiktoken)
VARIANTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "nfkc-in-encode": (_in_encode("unicodedata.normalize('NFKC', text)"), "the ﬁnal ① ㎏ answer"),
    "nfc-in-tokenize": (_in_tokenize("unicodedata.normalize('NFC', text)"), "cafe\u0301 and re\u0301sume\u0301"),
    "nfkc-on-the-instance": (_normalisation_on_the_instance, "ｆｕｌｌ ｗｉｄｔｈ and ﬀ"),
    "blank-lines": (_in_tokenize("re.sub(r'\\n{3,}', '\\n\\n', text)"), "first\n\n\n\n\nsecond"),
    "trailing-whitespace": (_in_tokenize("re.sub(r'[ \\t]+(?=\\n)', '', text)"), "line one   \nline two\t\nend"),
    "crlf": (_in_encode("text.replace('\\r\\n', '\\n')"), "windows\r\nline\r\nendings"),
    "tabs": (_in_tokenize("text.expandtabs(4)"), "col\tcol2\t\tcol3"),
    "zero-width-dropped": (_in_encode(f"re.sub('{ZERO_WIDTH}', '', text)"), "zero\u200bwidth\u200djoin"),
    "control-dropped": (_in_encode(f"re.sub('{CONTROL}', '', text)"), "bell\x07 and\x1b esc"),
    "fullwidth-to-ascii": (_in_encode(f"text.translate({FULLWIDTH})"), "ＡＢＣ１２３！"),
    "nbsp-to-space": (_in_tokenize("text.replace('\\u00a0', ' ')"), "100\u00a0km and\u00a0more"),
    "ellipsis": (_in_encode("text.replace('\\u2026', '...')"), "wait\u2026 what\u2026"),
    "lower-chunk-limit": (_constant("MAX_ENCODE_CHARS", "1_000"), "the" * 400),  # cut inside a "the"
    "lower-run-limit": (_constant("MAX_RUN_CHARS", "50"), "the" * 40 + " ok"),
    "digit-pre-tokenizer": (_digit_pre_tokenizer, "the year 2026 and 123456789"),
    "token-to-id-remap": (_token_to_id_remap, "add 1 and 2 then 3"),
}
