"""The card data: what a card reports about a run and each of its tasks, filled once the run has finished from its
plan, its trained model, its tasks' data and its metrics. One dataclass for every kind of run; which template renders
it follows from what the run publishes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...modeling.configuration_multitask import SEQUENCE, TOKEN
from ...modeling.problem_types import REGRESSION
from ...modeling.varlen_attention import TORCH_VARLEN
from ..evaluation import at_default_name, main_metric, task_config
from ..options import TRAINING_OPTIONS

__all__ = [
    "TEMPLATES_DIR",
    "DEFAULT_TEMPLATE",
    "TASK_TEMPLATE",
    "POS_WEIGHT_ORIGINS",
    "TaskCard",
    "CardData",
    "card_data",
    "training_settings",
]


def _model_cards_dir() -> Path:
    """The card templates: the repository's top-level model_cards/ folder, which the wheel ships as
    pooled_models/model_cards (setup.py maps it), so a pip-installed pooled-train finds them too."""
    package = Path(__file__).resolve().parents[2]
    installed = package / "model_cards"
    return installed if installed.is_dir() else package.parent / "model_cards"


TEMPLATES_DIR = _model_cards_dir()


DEFAULT_TEMPLATE = TEMPLATES_DIR / "pooled_classifier.md"  # one sequence task's classifier


TASK_TEMPLATE = TEMPLATES_DIR / "pooled_tasks.md"  # a token classifier, or a multi-task model


# Where a multi-label task's pos_weight came from (plan.TaskPlan.pos_weight_origin), as the model card says it.
POS_WEIGHT_ORIGINS = {
    "computed": "negatives / positives per label, counted in the training split",
    "given": "set with `--pos_weight`",
    "saved": "kept from the model this run started from",
}


@dataclass
class TaskCard:
    """What the card reports about one task."""

    name: str
    kind: str  # sequence or token
    config: Any  # the PooledConfig the task's head reads
    head_class: type  # the class of the task's head (its docstring says what it does)
    data: Any  # the task's DataArguments
    splits: list[dict[str, Any]]  # {"name", "rows", "truncated", "source"}
    max_seq_length: int
    loss_weight: float = 1.0
    head_learning_rate: float | None = None
    start_epoch: int = 0
    freeze_head: bool = False
    # Multi-label only: how the decision threshold and the positive weights were chosen (phrases the card completes),
    # and validation metrics before and after tuning: metric -> (at 0.5, at the tuned threshold).
    threshold_origin: str | None = None
    pos_weight_origin: str | None = None
    threshold_comparison: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def problem_type(self) -> str:
        return self.config.problem_type

    @property
    def labels(self) -> list[str]:
        if self.kind == SEQUENCE and self.problem_type == REGRESSION:
            return []
        return [self.config.id2label[index] for index in range(self.config.num_labels)]

    @property
    def main_metric(self) -> str:
        return main_metric(self.kind, self.problem_type, self.labels)


@dataclass
class CardData:
    """What the card reports about one run."""

    model_name: str  # the repository name, or the output folder's name
    repo_id: str  # what from_pretrained is given in the card's code (Hub id or local path)
    base_model: str
    base_model_on_hub: bool
    publishes: str  # sequence, token or multitask (plan.PUBLISHED_KINDS)
    tasks: list[TaskCard]
    training_settings: dict[str, Any]
    metrics: dict[str, float] = field(
        default_factory=dict
    )  # the run's metrics, as all_results.json holds them
    example_text: str = "An example sentence to classify."
    zero_shot: Any = None  # zero_shot_eval.ZeroShotResult of a run with --zero_shot_file

    @property
    def single(self) -> bool:
        return self.publishes != "multitask"

    @property
    def template(self) -> Path:
        return DEFAULT_TEMPLATE if self.publishes == SEQUENCE else TASK_TEMPLATE

    def metric_name(self, prefix: str, task: str, metric: str) -> str:
        """A task's metric as the run named it: ``eval_f1`` (one task), ``eval_<task>_f1`` (a task among several)."""
        return f"{prefix}_{metric}" if self.single else f"{prefix}_{task}_{metric}"


def card_data(
    plan,
    model,
    tasks: dict[str, Any],
    metrics: dict[str, float],
    pushed: bool,
    layout: dict | None = None,
    optimizer=None,
) -> CardData:
    """The card data of a finished run: its plan, its trained model, its tasks' data and its metrics (``layout``:
    the rows of the batch layout chosen from the data, batch_layout.BatchLayout.card_rows; ``optimizer``: the one
    training used, whose groups give the rates the options' rows state)."""
    args = plan.trainer_args
    name = args.hub_model_id or plan.output_dir.name
    cards = [_task_card(task_plan, model, tasks[name]) for name, task_plan in plan.tasks.items()]
    sequence = plan.publishes == SEQUENCE
    card = CardData(
        model_name=name.split("/")[-1],
        repo_id=name if pushed else str(plan.output_dir),
        base_model=plan.source.base_model,
        base_model_on_hub=not Path(plan.source.base_model).exists(),
        publishes=plan.publishes,
        tasks=cards,
        training_settings=training_settings(
            args,
            problem_type=cards[0].problem_type if sequence else None,
            task_sampling=not plan.single,
            trained=(model, optimizer),
        )
        | batch_layout_rows(args, model)
        | (layout if args.do_train and layout else {}),
        metrics=dict(metrics),
        example_text=plan.example_texts[0] if plan.example_texts else _first_text(tasks),
    )
    for task, task_plan in zip(cards, plan.tasks.values(), strict=True):
        if task_plan.thresholds is not None and task_plan.thresholds.tunes:
            task.threshold_comparison = _threshold_comparison(card, task.name)
    return card


def _task_card(task_plan, model, task) -> TaskCard:
    spec = task_plan.spec
    heads = getattr(model.classifier, "heads", None)
    head = heads[spec.name] if heads is not None else model.classifier
    files = spec.data.files()
    validation = task.splits.get("validation")
    thresholds = task_plan.thresholds
    return TaskCard(
        name=spec.name,
        kind=spec.kind,
        config=task_config(model, spec.name),
        # the head itself: a sequence classifier's classifier also holds the pooler
        head_class=type(head.head if spec.kind == SEQUENCE else head.token_head),
        data=spec.data,
        splits=[
            {
                "name": split.name,
                "rows": len(split.encoded),
                "truncated": split.truncated,
                "source": spec.data.dataset_name or Path(files[split.name]).name,
            }
            for split in task.splits.values()
        ],
        max_seq_length=task.max_length,
        loss_weight=spec.loss_weight,
        head_learning_rate=spec.head_learning_rate,
        start_epoch=spec.start_epoch,
        freeze_head=spec.freeze_head,
        threshold_origin=thresholds.describe(len(validation.encoded) if validation else None)
        if thresholds
        else None,
        pos_weight_origin=POS_WEIGHT_ORIGINS.get(task_plan.pos_weight_origin),
    )


def _first_text(tasks: dict[str, Any]) -> str:
    first = next(iter(tasks.values()))
    column = first.columns[0] if first.kind == TOKEN else first.spec.data.text_column
    value = next(iter(first.splits.values())).dataset[0][column]
    return " ".join(value) if isinstance(value, list) else value


def _threshold_comparison(card: CardData, task: str) -> dict[str, tuple[float, float]]:
    """Validation metric -> (at 0.5, at the tuned threshold), for the metrics a tuned task reports both ways."""
    prefix = "eval" if card.single else f"eval_{task}"
    return {
        metric: (card.metrics[at_default_name(metric, prefix)], card.metrics[f"{prefix}_{metric}"])
        for metric in ("f1_micro", "f1_macro", "exact_match")
        if at_default_name(metric, prefix) in card.metrics and f"{prefix}_{metric}" in card.metrics
    }


def training_settings(
    args, problem_type: str | None = None, task_sampling: bool = False, trained: tuple = (None, None)
) -> dict[str, Any]:
    """The card's "Training settings" rows, written once for every kind of run: a run of one sequence task
    (``problem_type`` given) names its problem type, gradient accumulation, scheduler and early stopping; a run of
    tasks names its heads' rate and, with several tasks, its task sampling. ``trained``: the model and the optimizer
    it trained with, for the options' rows that give what training used."""
    sequence = problem_type is not None
    settings: dict[str, Any] = {"problem type": problem_type} if sequence else {}
    if not args.do_train:
        return settings
    if task_sampling:
        settings["task sampling"] = args.task_sampling + (
            f" (alpha {args.sampling_alpha})" if args.task_sampling == "temperature" else ""
        )
    settings.update(
        {
            "learning rate (backbone)": args.learning_rate,
            f"learning rate ({'pooler and head' if sequence else 'heads'})": args.head_learning_rate
            or args.learning_rate,
            "backbone frozen": args.freeze_backbone,
            "epochs": args.num_train_epochs if args.max_steps <= 0 else f"{args.max_steps} steps",
            "batch size per device": args.per_device_train_batch_size,
            "devices": args.world_size,
        }
    )
    if sequence:
        settings["gradient accumulation steps"] = args.gradient_accumulation_steps
    settings.update({"warmup": args.warmup_steps, "weight decay": args.weight_decay})
    if sequence:
        settings["scheduler"] = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    settings["seed"] = args.seed
    settings.update(chosen_training_options(args, *trained))
    if args.load_best_model_at_end:
        settings["best model by"] = args.metric_for_best_model
    if sequence and args.early_stopping_patience:
        settings["early stopping patience"] = args.early_stopping_patience
    return settings


def chosen_training_options(args, model=None, optimizer=None) -> dict[str, Any]:
    """The training options a run turned on (off by default), as the model card names them."""
    options: dict[str, Any] = {}
    for option in TRAINING_OPTIONS.values():
        options.update(option.card_row(args, model, optimizer))
    if getattr(args, "label_embedding_learning_rate", None) is not None:
        options["learning rate (label embeddings)"] = args.label_embedding_learning_rate
    if getattr(args, "label_embedding_weight_decay", None) is not None:
        options["weight decay (label embeddings)"] = args.label_embedding_weight_decay
    return options


def batch_layout_rows(args, model) -> dict[str, Any]:
    """The "Training settings" rows of how a run laid out its batches (train/batch_layout.py), where it chose other
    than padded batches of per_device_train_batch_size rows."""
    rows: dict[str, Any] = {}
    if not args.do_train:
        return rows
    backbone = model.get_backbone() if hasattr(model, "get_backbone") else None
    if backbone is not None and backbone.config._attn_implementation == TORCH_VARLEN:
        rows["batches"] = "padding-free (torch varlen attention)"
    if args.max_tokens_per_batch is not None:
        rows["max tokens per batch"] = args.max_tokens_per_batch
    if args.pad_to_multiple_of is not None:
        rows["padded to a multiple of"] = args.pad_to_multiple_of
    return rows
