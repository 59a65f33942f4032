"""The learning rate of ``first_plus_rest``'s gate (``--document_gate_learning_rate``; docs/long-documents.md): the
gate that lets a document's windows after the first into its vector trains at DOCUMENT_GATE_RATE_FACTOR times the rate
of the head it belongs to, unless the flag gives a rate. The model card gives the rate the optimizer gave it, read from
its parameter groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import UsageError
from ...modeling.window_pooling import document_gate_parameters
from ..arguments.documents import DOCUMENT_GATE_RATE_FACTOR  # the flag's default, with its measurement
from . import TrainingOption, register_option, require_number

__all__ = ["DocumentGateRate", "gate_learning_rate"]


def gate_learning_rate(given: float | None, head_rate: float) -> float:
    """The gate's rate: ``given`` (``--document_gate_learning_rate``), else DOCUMENT_GATE_RATE_FACTOR times
    ``head_rate``, the rate of the head the gate belongs to."""
    return DOCUMENT_GATE_RATE_FACTOR * head_rate if given is None else given


@register_option
class DocumentGateRate(TrainingOption):
    """``--document_gate_learning_rate``: first_plus_rest's gate at a rate of its own. Its rule applies to every model
    with the gate, the flag given or not (unset: ten times the head's rate)."""

    name = "document_gate_learning_rate"
    card_label = "learning rate (cross-window gate)"
    offers_loss = (
        False  # a rate rule only: document runs keep Trainer's own loss path, as before it was an option
    )

    def is_on(self, args) -> bool:
        return getattr(args, self.name, None) is not None

    def check_arguments(self, args) -> None:
        if self.is_on(args):
            require_number(self.name, getattr(args, self.name), lambda value: value > 0, "> 0 (or unset)")

    def check_model(self, model, args) -> None:
        if self.is_on(args) and not document_gate_parameters(model):
            raise UsageError(
                "--document_gate_learning_rate sets the rate of the gate of document_pooling 'first_plus_rest', but "
                f"this model's document_pooling is {getattr(model.config, 'document_pooling', None)!r}: leave it "
                "out, or choose first_plus_rest."
            )

    def learning_rates(self, model, args, head_rates: Mapping[int, float]) -> dict[int, float]:
        given = getattr(args, self.name, None)
        # from the rate its head got (a head without a rate of its own trains at the run's)
        return {
            gate: gate_learning_rate(given, head_rates.get(gate, args.learning_rate))
            for gate in document_gate_parameters(model)
        }

    def card_row(self, args, model=None, optimizer=None) -> dict[str, Any]:
        """The rate the optimizer gave the gate (its group's starting rate, before the schedule moved it); nothing
        where no model with the gate was trained."""
        gates = set() if model is None or optimizer is None else document_gate_parameters(model)
        for group in [] if not gates else optimizer.param_groups:
            if any(id(parameter) in gates for parameter in group["params"]):
                return {self.card_label: group.get("initial_lr", group["lr"])}
        return {}
