"""An exponential moving average of the weights (``--ema_decay``): evaluated and saved in place of the last weights.

After every optimizer step, ``average <- decay x average + (1 - decay) x weights`` for every trained parameter, on
the parameter's own device; the average starts from the weights training starts from. The raw weights go on
training; the average smooths out the noise of the last steps, which often generalises better than any single
point of the trajectory. The average covers about the last ``1 / (1 - decay)`` steps, so the decay must suit the
run's length: with 0.999 a run of 250 steps ends with an average that is still mostly the starting weights (and
their untrained head), which ``AverageWeights`` warns of.

Where the average is used:

* every evaluation during training scores the averaged weights (so do ``load_best_model_at_end`` and early stopping,
  which read those scores), then the raw weights come back;
* when training ends the averaged weights replace the raw ones in the model, so the final evaluation, threshold
  tuning, prediction and the saved model all use them (with ``load_best_model_at_end``: the best checkpoint's average);
* checkpoints keep the raw weights (for resuming) and the average beside them (``ema.safetensors``), which a resumed
  run continues from; a run with ``--ema_decay`` refuses to resume from a checkpoint without one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import TrainerCallback

from .errors import UsageError

__all__ = ["EMA_FILE", "WeightAverage", "AverageWeights", "check_checkpoint_average"]

logger = logging.getLogger(__name__)

EMA_FILE = "ema.safetensors"


class WeightAverage:
    """The exponential moving average of ``parameters`` (name -> parameter), updated by ``update``."""

    def __init__(self, parameters: dict[str, torch.nn.Parameter], decay: float):
        self.decay = decay
        self.names = list(parameters)
        self.parameters = list(parameters.values())
        self.average = [parameter.detach().clone() for parameter in self.parameters]

    @torch.no_grad()
    def update(self) -> None:
        # lerp(average, weights, 1 - decay) = decay * average + (1 - decay) * weights; exact at decay 0
        torch._foreach_lerp_(
            self.average, [parameter.detach() for parameter in self.parameters], 1.0 - self.decay
        )

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """Put the averaged weights into the model, for good."""
        torch._foreach_copy_([parameter.data for parameter in self.parameters], self.average)

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The averaged weights in the model for the duration, the raw ones back after."""
        with torch.no_grad():
            raw = [parameter.detach().clone() for parameter in self.parameters]
        self.copy_to_model()
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_([parameter.data for parameter in self.parameters], raw)

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        save_file(
            {
                name: tensor.detach().contiguous().cpu()
                for name, tensor in zip(self.names, self.average, strict=True)
            },
            str(Path(folder) / EMA_FILE),
        )

    @torch.no_grad()
    def load(self, folder: str | Path) -> None:
        from safetensors.torch import load_file

        saved = load_file(str(Path(folder) / EMA_FILE))
        if set(saved) != set(self.names):
            missing = sorted(set(self.names) - set(saved))[:3]
            raise UsageError(
                f"{Path(folder) / EMA_FILE} holds the average of other parameters than this run trains (e.g. missing "
                f"{', '.join(missing) or 'none'}): it was saved by a run with other settings."
            )
        for tensor, name in zip(self.average, self.names, strict=True):
            tensor.copy_(saved[name].to(tensor.device, tensor.dtype))


def check_checkpoint_average(checkpoint: str | Path, ema_decay: float | None) -> None:
    """A run with ``ema_decay`` resumes only from a checkpoint that holds the average; one without warns that the
    checkpoint's average is not used."""
    found = (Path(checkpoint) / EMA_FILE).is_file()
    if ema_decay is not None and not found:
        raise UsageError(
            f"resume_from_checkpoint: {checkpoint} holds no {EMA_FILE} (the average of the weights), so --ema_decay "
            "cannot continue it: it was saved by a run without --ema_decay. Resume without --ema_decay, or start "
            "the run again."
        )
    if ema_decay is None and found:
        logger.warning(
            "%s holds an average of the weights (%s); this run, without --ema_decay, ignores it.",
            checkpoint,
            EMA_FILE,
        )


class AverageWeights(TrainerCallback):
    """Keeps ``trainer.weight_average`` of the parameters the optimizer trains: made (or read from the checkpoint a
    run resumes from) when training begins, updated after every optimizer step."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = self.trainer
        trained = {id(parameter) for group in trainer.optimizer.param_groups for parameter in group["params"]}
        parameters = {
            name: parameter for name, parameter in model.named_parameters() if id(parameter) in trained
        }
        trainer.weight_average = WeightAverage(parameters, args.ema_decay)
        if trainer.resumed_from is not None:
            trainer.weight_average.load(trainer.resumed_from)
        horizon = 1 / (1 - args.ema_decay)
        if horizon > state.max_steps / 2:
            logger.warning(
                "ema_decay=%s averages over about the last %d steps, and this run has %d: the average stays close "
                "to the weights training started from. A decay of about 1 - 10 / steps (%.3g) suits it better.",
                args.ema_decay,
                horizon,
                state.max_steps,
                max(0.0, 1 - 10 / max(state.max_steps, 1)),
            )

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer.weight_average.update()
