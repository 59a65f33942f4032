"""The model card: one :class:`CardData` that every run fills (as setfit's ``model_card.py`` keeps one dataclass of
card data; data.py), rendered with the templates in ``model_cards/``: ``pooled_classifier.md`` for a run that
publishes one sequence task's classifier (classifier.py), ``pooled_tasks.md`` for a token classifier or a multi-task
model (tasks.py). What a template shows is worked out from the card data; the templates only lay it out."""

from __future__ import annotations

from huggingface_hub import ModelCard

from .classifier import METRIC_IDS, classifier_variables
from .data import (
    DEFAULT_TEMPLATE,
    TASK_TEMPLATE,
    TEMPLATES_DIR,
    CardData,
    TaskCard,
    card_data,
    training_settings,
)
from .markdown import code_span, rounded
from .tasks import TASK_METRICS, tasks_variables

__all__ = [
    "TEMPLATES_DIR",
    "DEFAULT_TEMPLATE",
    "TASK_TEMPLATE",
    "METRIC_IDS",
    "TASK_METRICS",
    "TaskCard",
    "CardData",
    "card_data",
    "code_span",
    "rounded",
    "render_model_card",
    "training_settings",
]


def render_model_card(card: CardData) -> ModelCard:
    """The card, rendered with its template."""
    variables = classifier_variables(card) if card.template == DEFAULT_TEMPLATE else tasks_variables(card)
    metadata = variables.pop("card_data")
    return ModelCard.from_template(metadata, template_path=str(card.template), code=code_span, **variables)
