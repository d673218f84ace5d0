"""The drafter handoff: a trained EAGLE-3 checkpoint converted into the folder SGLang serves (`eagle-datagen
convert-drafter`, docs/internals/training.md). numpy alone: no torch in the project's environment."""
