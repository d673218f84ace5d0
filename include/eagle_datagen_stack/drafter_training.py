"""The CPU loop's steps in the speculators side environment (`make speculators-env`: speculators 0.9.0, torch, a
transformers of its own), each a script of engine/cpu_loop/ run by that environment's Python:

- `target_hidden_states`: the target's aux and last hidden states for speculators export folders;
- `train_drafter`: `speculators train` on the CPU with a step budget (`random_drafter`: its `--dry-run`, the same
  draft initialised and saved untrained), the checkpoint then converted by the product's own command,
  `eagle-datagen convert-drafter` (in the project's environment), into the folder SGLang serves with
  `--speculative-draft-model-path`.

Aux layer ids are speculators' everywhere here (transformers' `hidden_states[k]`); the conversion writes SGLang's
(one lower for the loop's Llama target). They are always given explicitly (`aux_layer_ids`): the trainers' default
[2, n/2, n-3] means nothing for a small target and differs between conventions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from eagle_datagen_stack.processes import tail

PROJECT = Path(__file__).resolve().parents[2]
SCRIPTS = PROJECT / "engine" / "cpu_loop"
FINAL = "final"  # the folder under --save-path that train_drafter.py saves the trained checkpoint in


class DrafterStepFailed(RuntimeError):
    """A side-environment step exited non-zero; the message ends with its log."""


def speculators_python() -> Path:
    return Path(os.environ.get("EAGLE_DATAGEN_SPECULATORS_PYTHON", PROJECT / ".venv-speculators" / "bin" / "python"))


def missing_side_environment() -> str | None:
    python = speculators_python()
    return None if python.exists() else f"the speculators environment {python} is not built: run `make speculators-env`"


def aux_layer_ids(num_layers: int) -> list[int]:
    """Three distinct speculators ids SGLang can also capture (it cannot take the last layer's output): for four or
    more layers the outputs of layers 0, n/2 - 1 and n - 2. A smaller target gets the embeddings and every layer
    output but the last (SGLang id -1 is the embeddings; not tried with a server here)."""
    if num_layers >= 4:
        return [1, num_layers // 2, num_layers - 1]
    return list(range(num_layers))


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 120  # optimizer steps, the same for every drafter compared (on-policy converges by ~100)
    total_seq_len: int = 512  # tokens packed into one step
    learning_rate: float = 1e-2
    seed: int = 0


def _run(script: str, args: list[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    # One OpenMP thread: the draft's ops are tiny, and on a busy 2-core machine two threads spin against each other
    # and everything else (measured: 3 s per training step with two threads, 0.2 s with one).
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("VIRTUAL_ENV", None)
    with log.open("ab") as out:
        done = subprocess.run([str(speculators_python()), str(SCRIPTS / script), *args], stdout=out,
                              stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise DrafterStepFailed(f"{script} {' '.join(args[:3])} ... exited {done.returncode}; {log} ends:\n"
                                f"{tail(log)}")


def target_hidden_states(target: Path, data_dirs: list[Path], aux: list[int], log: Path) -> None:
    _run("target_hidden_states.py", [str(target), *map(str, data_dirs), "--aux-layers", ",".join(map(str, aux))],
         log)


def _mask_token_id(target: Path) -> int:
    """An id the draft never sees as input (speculators asks for one; with it given, it loads no tokenizer)."""
    config = json.loads((target / "config.json").read_text())
    for key in ("pad_token_id", "eos_token_id"):
        value = config.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int):
            return value
    return int(config["vocab_size"]) - 1


def _train_args(target: Path, data: Path, vocab: Path, draft_vocab_size: int, aux: list[int], save: Path,
                settings: TrainSettings) -> list[str]:
    return [
        "--speculator-type", "eagle3", "--verifier-name-or-path", str(target), "--data-path", str(data),
        # one draft vocabulary for every drafter compared, so that they differ only in their training rows
        "--draft-vocab-size", str(draft_vocab_size),
        "--d2t-path", str(vocab / f"d2t-{draft_vocab_size}.npy"),
        "--t2d-path", str(vocab / f"t2d-{draft_vocab_size}.npy"),
        "--target-layer-ids", *map(str, aux),
        "--num-layers", "1", "--full-attention-indices", "0",  # SGLang's drafter: one layer, full attention
        "--no-norm-before-residual",  # SGLang's first draft layer keeps the un-normed residual
        "--draft-attn-impl", "eager", "--loss-implementation", "eager",  # flex attention and fused loss need a GPU
        "--mask-token-id", str(_mask_token_id(target)), "--hidden-states-dtype", "float32",
        "--total-seq-len", str(settings.total_seq_len), "--lr", str(settings.learning_rate),
        "--seed", str(settings.seed),
        "--max-steps", str(settings.steps), "--epochs", str(settings.steps),  # an epoch has a step at least
        "--train-data-ratio", "0.97",  # speculators requires a validation split
        "--on-missing", "raise", "--num-workers", "0", "--log-freq", "50", "--save-path", str(save),
    ]


def convert(checkpoint: Path, target: Path, sglang_out: Path, log: Path) -> Path:
    """The product's `eagle-datagen convert-drafter` of a checkpoint for the target; its output in the log."""
    command = [sys.executable, "-m", "eagle_datagen.cli", "convert-drafter", "--checkpoint", str(checkpoint),
               "--target-config", str(target), "--output", str(sglang_out)]
    with log.open("ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise DrafterStepFailed(f"eagle-datagen convert-drafter exited {done.returncode}; {log} ends:\n{tail(log)}")
    return sglang_out


def train_drafter(target: Path, data: Path, vocab: Path, draft_vocab_size: int, aux: list[int], save: Path,
                  settings: TrainSettings, sglang_out: Path, log: Path) -> Path:
    """Train `settings.steps` steps on `data` (hidden states written), then convert the checkpoint into the SGLang
    drafter folder `sglang_out` (returned)."""
    _run("train_drafter.py", _train_args(target, data, vocab, draft_vocab_size, aux, save, settings), log)
    return convert(save / FINAL, target, sglang_out, log)


def random_drafter(target: Path, data: Path, vocab: Path, draft_vocab_size: int, aux: list[int], save: Path,
                   settings: TrainSettings, sglang_out: Path, log: Path) -> Path:
    """The same draft initialised and saved without a training step (`speculators train --dry-run`), converted."""
    args = _train_args(target, data, vocab, draft_vocab_size, aux, save, settings)
    _run("train_drafter.py", [*args, "--dry-run"], log)
    return convert(save, target, sglang_out, log)
