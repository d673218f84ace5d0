"""Prompt sources: locations, readers, recipes and the collection of validated, deduplicated prompts."""
