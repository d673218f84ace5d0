"""Multi-turn and agentic conversations generated on-policy: one generation step per assistant turn."""
