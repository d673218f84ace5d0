"""Before any GPU time: the modes a run asks for are ones the model profile has, and the chat template honours
them (modes.py, docs/generation.md "Modes")."""

from __future__ import annotations

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.stage import CANARY_MESSAGES, RunOptions, category_settings
from eagle_datagen.modes import INSTANT, sample_modes
from eagle_datagen.tokenization.stage import TokenizeSetup


def check_modes(setup: TokenizeSetup, options: RunOptions) -> None:
    """Before any GPU time: every mode the run asks for is one the profile has, and the tokenizer's chat template
    honours the instant mode's variables (a template that ignores `thinking=False` would end every instant
    prompt in `<think>`: each one would be rejected, one at a time)."""
    recipe, chosen = setup.recipe, options.prompts.categories if options.prompts is not None else None
    categories = chosen or (list(recipe.categories) if recipe is not None else [""])
    planned = category_settings(categories, recipe, setup.profile, options.sampling, setup.seed)
    if not any(INSTANT in sample_modes(s.mode) for s in planned.values()):
        return
    instant = setup.profile.mode(INSTANT)
    try:
        ids = list(
            setup.loaded.tokenizer.apply_chat_template(
                CANARY_MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False, **instant.template_kwargs
            )
        )
    except Exception as exc:  # templates may raise anything
        raise ConfigError(f"the chat template of {setup.loaded.spec} fails in instant mode: {exc}") from None
    suffix = instant.prompt_suffix_ids
    if tuple(ids[-len(suffix) :]) != suffix:
        raise ConfigError(
            f"the chat template of {setup.loaded.spec} ignores {instant.template_kwargs}: an instant prompt ends in "
            f"{ids[-len(suffix) :]}, not {instant.describe_suffix()}; use the model's own chat template (mode "
            "thinking needs no switch)"
        )
