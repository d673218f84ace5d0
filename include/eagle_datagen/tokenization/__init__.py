"""Render prompts with the model's chat template and tokenize them on the client."""
