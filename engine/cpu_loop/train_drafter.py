"""`speculators train` (0.9.0) on a CPU, with the two run-time patches it needs there (CPU loop only).

speculators 0.9.0 trains on an accelerator; on a machine without one its Trainer fails at its first `.to()`:
- it moves the model and every batch `.to(get_local_rank())`, the integer 0, which torch reads as accelerator 0
  ("Cannot access accelerator device when none is available"): here the rank is the CPU device, and the autocast
  device type (which it takes from the accelerator, "cuda" without one) is "cpu";
- its step timer calls `torch.accelerator.synchronize()` on every logged step, which raises without an
  accelerator: on a CPU there is nothing to wait for, so it returns;
- `--max-steps` stops an epoch, not the run: every later epoch still trains one step and saves a checkpoint.
  Here an epoch after the budget trains and validates nothing, and the model is saved once, when the budget is
  reached, under SAVE_PATH/final (or at the end of the last epoch when the data runs out first). So two drafters
  given the same `--max-steps` (and `--epochs` at least as large) get the same number of optimizer steps, whatever
  their data.
Nothing of the installed package is edited; every flag goes to `speculators train` as it is. The checkpoint
(SAVE_PATH/final, or SAVE_PATH itself after `--dry-run`) is then converted by the product's
`eagle-datagen convert-drafter` (eagle_datagen_stack/drafter_training.py).

Usage (.venv-speculators): python train_drafter.py SPECULATORS-TRAIN-FLAGS... --max-steps N --save-path DIR
"""

from __future__ import annotations

import sys

import speculators.train.trainer as trainer_module
import torch
from speculators.__main__ import app

FINAL = "final"  # the checkpoint folder under --save-path that the loop converts (drafter_training.FINAL)


def _budget_spent(trainer) -> bool:
    return trainer.config.max_steps is not None and trainer.global_step >= trainer.config.max_steps


def patch_trainer_for_cpu() -> None:
    trainer_class = trainer_module.Trainer
    plain_synchronize = torch.accelerator.synchronize

    def synchronize(device=None):
        if torch.accelerator.is_available():
            plain_synchronize(device)

    torch.accelerator.synchronize = synchronize
    trainer_module.get_local_rank = lambda: "cpu"  # Trainer's `.to(self.local_rank)` then means the CPU
    plain_init = trainer_class.__init__
    plain_epoch = trainer_class.train_epoch
    plain_val = trainer_class.val_epoch
    plain_save = trainer_class.maybe_save_checkpoint
    plain_run = trainer_class.run_training

    def __init__(self, *args, **kwargs):
        plain_init(self, *args, **kwargs)
        self.device_type = "cpu"  # torch.autocast's device type ("cuda" without an accelerator)

    def train_epoch(self, epoch, **kwargs):
        if not _budget_spent(self):
            plain_epoch(self, epoch, **kwargs)

    def val_epoch(self, epoch, **kwargs):
        return None if _budget_spent(self) else plain_val(self, epoch, **kwargs)

    def maybe_save_checkpoint(self, epoch, local_step=0):
        if epoch == "interrupted":
            return plain_save(self, epoch, local_step)
        if _budget_spent(self) and not getattr(self, "_saved_final", False):
            self._saved_final = True
            plain_save(self, FINAL)

    def run_training(self):
        plain_run(self)
        if not getattr(self, "_saved_final", False):  # the data ran out before the step budget
            self._saved_final = True
            plain_save(self, FINAL)
        print(f"trained {self.global_step} steps; checkpoint {self.checkpointer.path / FINAL}", flush=True)

    trainer_class.__init__ = __init__
    trainer_class.train_epoch = train_epoch
    trainer_class.val_epoch = val_epoch
    trainer_class.maybe_save_checkpoint = maybe_save_checkpoint
    trainer_class.run_training = run_training


def main(args: list[str]) -> None:
    patch_trainer_for_cpu()
    sys.argv = ["speculators", "train", *args]
    try:
        app()
    except SystemExit as exit_:  # typer ends with SystemExit(0) on success
        if exit_.code not in (0, None):
            raise


if __name__ == "__main__":
    main(sys.argv[1:])
