"""Talking to SGLang: sample identity, the /generate client, endpoint balancing, retries, preflight."""
