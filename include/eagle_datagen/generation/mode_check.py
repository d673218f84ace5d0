"""Before any GPU time: the modes a run asks for are ones the model profile has, and the chat template honours
them (modes.py, docs/internals/generation.md "Modes")."""

from __future__ import annotations

from typing import Any

from eagle_datagen.errors import ConfigError
from eagle_datagen.generation.plan import RunPlan
from eagle_datagen.generation.stage import CANARY_MESSAGES, RunOptions, category_settings
from eagle_datagen.modes import INSTANT, SAMPLE_MODES, sample_modes
from eagle_datagen.tokenization.stage import TokenizeSetup


def run_modes(setup: TokenizeSetup, options: RunOptions, plan: RunPlan | None = None) -> dict[str, dict[str, Any]]:
    """The modes the run sends prompts in (its plan's categories, else the ones it will plan), each with the chat
    template variables that render it: what the tokenizer check renders its canaries in."""
    if plan is not None:
        modes = {mode for s in plan.categories.values() for mode in sample_modes(s.mode)}
    else:
        recipe, chosen = setup.recipe, options.prompts.categories if options.prompts is not None else None
        categories = chosen or (list(recipe.categories) if recipe is not None else [""])
        planned = category_settings(categories, recipe, setup.profile, options.sampling, setup.seed)
        modes = {mode for s in planned.values() for mode in sample_modes(s.mode)}
    return {mode: dict(setup.profile.mode(mode).template_kwargs) for mode in SAMPLE_MODES if mode in modes}


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
