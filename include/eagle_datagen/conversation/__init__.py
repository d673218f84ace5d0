"""Multi-turn and agentic conversations generated on-policy: one generation step per assistant turn."""

# The `turns` setting (recipe, --turns, trigger form): last = one sample per record, the last answer;
# each = one sample per assistant turn (docs/internals/multi-turn.md). Kept here, import-free, for the CLI.
TURNS: tuple[str, ...] = ("last", "each")
