"""Token-level validation of generated samples (`rules`) and run-level diagnoses of what went wrong (`diagnosis`)."""

from eagle_datagen.validation.diagnosis import DiagnosisThresholds, ValidationFailed, check_run, diagnose
from eagle_datagen.validation.rules import (
    REASONS,
    ValidationLimits,
    answer_length,
    find_repetition_loop,
    reasoning_length,
    validate_sample,
)

__all__ = [
    "REASONS",
    "DiagnosisThresholds",
    "ValidationFailed",
    "ValidationLimits",
    "answer_length",
    "check_run",
    "diagnose",
    "find_repetition_loop",
    "reasoning_length",
    "validate_sample",
]
