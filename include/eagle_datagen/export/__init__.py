"""Exports of published runs and releases in the formats the EAGLE-3 trainers read (`eagle-datagen export`).

`stage.run_export` is the entry point; `formats` writes each format, `source` says what is read (only
files a manifest or release lists, checksums checked), `rows` how training rows are built and cut. This
module stays free of heavy imports: the command line reads FORMATS when it builds its parser.
"""

FORMATS = ("jsonl", "speculators", "specforge", "torchspec", "hf")
