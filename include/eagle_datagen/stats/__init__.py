"""Run statistics, token frequencies, the EAGLE-3 draft vocabulary and the HTML dataset report."""

from eagle_datagen.stats.draft_vocab import DraftVocab, build_draft_vocab
from eagle_datagen.stats.report import render_report, report_summary
from eagle_datagen.stats.statistics import (
    HISTOGRAM_EDGES,
    TokenCounter,
    compute_statistics,
    token_frequency_summary,
)

__all__ = [
    "HISTOGRAM_EDGES",
    "DraftVocab",
    "TokenCounter",
    "build_draft_vocab",
    "compute_statistics",
    "render_report",
    "report_summary",
    "token_frequency_summary",
]
