"""The model a plan describes: what the run publishes (a ``PooledForSequenceClassification`` for one sequence task, a
``PooledForTokenClassification`` for one token task, a ``PooledForMultiTask`` for several), built on the backbone
with each task's head settings, or loaded from the model a train.py run saved (whose settings cannot change), or the
model factory's (the sweep's vanilla baseline); the tokenizer and the length limit; freezing."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoTokenizer

from ..errors import UsageError
from ..modeling.backbone import position_offset
from ..modeling.configuration_multitask import SEQUENCE, TOKEN
from ..modeling.modeling_multitask import PooledForMultiTask
from ..modeling.modeling_pooled import PooledForSequenceClassification, PooledPreTrainedModel
from ..modeling.modeling_token import PooledForTokenClassification
from ..modeling.sentence_transformers_folder import read_sentence_transformers_folder
from ..modeling.text_config import max_positions_of, text_config_of
from ..modeling.text_length import NO_TOKENIZER_LIMIT
from .options import backbone_of, task_head_parameters

if TYPE_CHECKING:  # annotations only
    from .data import TaskData
    from .plan import RunPlan, TaskPlan
    from .source import ModelSource

__all__ = [
    "MODEL_CLASSES",
    "build_model",
    "load_tokenizer",
    "backbone_max_length",
    "check_label_text_lengths",
    "choose_max_length",
    "warn_of_another_length",
    "record_max_length",
    "freeze_backbone",
    "freeze_heads",
]

logger = logging.getLogger("pooled_models.train")

SENTENCE_TRANSFORMERS_LENGTH = "the max_seq_length of its sentence_bert_config.json"


# Why a run from a sentence-transformers folder reads what the backbone reads rather than the folder's max_seq_length
# (all-MiniLM-L6-v2: 256 of 512): that is its embeddings' serving length, and train.py's defaults measured no worse at
# the backbone's length on fortunes, a tie on package descriptions (none is longer than 256 tokens), at the cost of
# the tokens the longer texts hold (bench/text_length.py; docs/training.md, "The text length").
EMBEDDING_LENGTH_SET_ASIDE = (
    "; not its sentence_bert_config.json's {length}, the length its embeddings are served at: a classifier reads the "
    "rest of a long text, measured in bench/results/text_length/report.md"
)


# What a run publishes -> the class of its model.
MODEL_CLASSES = {
    SEQUENCE: PooledForSequenceClassification,
    TOKEN: PooledForTokenClassification,
    "multitask": PooledForMultiTask,
}


def build_model(plan: RunPlan, tasks: dict[str, TaskData], tokenizer):
    """The plan's model: the factory's, the saved one, or a new one on the backbone; its pad token the tokenizer's."""
    source = plan.source
    try:
        if plan.model_factory is not None:
            (task,) = tasks.values()
            model = plan.model_factory(source, task.labels, tokenizer)
        elif source.saved is not None:
            model = _saved_model(plan)
            _state_problem_types(model, tasks)
        else:
            model = _new_model(plan, tasks, tokenizer)
    # a setting the config refuses (the typed configs raise StrictDataclassError for a field of the wrong type or value),
    # a pooling the backbone cannot take...
    except (ValueError, StrictDataclassError) as error:
        raise UsageError(str(error)) from error
    except OSError as error:  # no safetensors weights, a download that failed...
        what = "model" if source.saved is not None else "backbone"
        raise UsageError(f"Cannot load the {what} {source.path!r}: {error}") from error
    model.config.pad_token_id = tokenizer.pad_token_id
    check_label_text_lengths(tokenizer, model)
    return model


def _saved_model(plan: RunPlan):
    """The model an earlier run saved, which the run continues or evaluates as it was built."""
    source = plan.source
    if plan.single:
        (task,) = plan.tasks.values()
        changed = {
            name: value for name, value in _requested(task).items() if getattr(source.saved, name) != value
        }
        if changed:
            raise UsageError(
                f"{source.path} is a trained pooled model; its settings cannot change "
                f"({', '.join(f'{name}={value!r}' for name, value in changed.items())}). Start from its backbone instead."
            )
    else:
        changed = [name for name, task in plan.tasks.items() if _requested(task)]
        if changed:
            raise UsageError(
                f"{source.path} is a trained multi-task model; the head settings of its tasks cannot change (task "
                f"{changed[0]!r} sets {', '.join(_requested(plan.tasks[changed[0]]))}). Start from its backbone "
                "instead."
            )
    return MODEL_CLASSES[plan.publishes].from_pretrained(
        source.path,
        use_safetensors=True,
        trust_remote_code=False,
        **source.hub_kwargs(),
        **plan.model_settings,
    )


def _requested(task: TaskPlan) -> dict[str, Any]:
    """The head settings a run asks of a saved model: the user's, with the label descriptions as their JSON, file and
    data column give them (the setting itself may be a path; the column is a data setting)."""
    requested = dict(task.spec.model)
    if "label_descriptions" in task.settings:
        requested["label_descriptions"] = task.settings["label_descriptions"]
    return requested


def _state_problem_types(model, tasks: dict[str, TaskData]) -> None:
    """Give a saved sequence head whose config names no problem type the one its labels were read as
    (``Labels.from_config``), so metrics, thresholds, predictions and the published config agree. transformers' own
    classifiers record it the same way, at their first loss."""
    for name, task in tasks.items():
        if task.kind != SEQUENCE:
            continue
        if isinstance(model, PooledForMultiTask):
            if model.task_configs[name].problem_type is None:
                model.update_task(name, problem_type=task.labels.problem_type)
        elif model.config.problem_type is None:
            model.config.problem_type = task.labels.problem_type


def _new_model(plan: RunPlan, tasks: dict[str, TaskData], tokenizer):
    """A new model on the backbone: a head per task, with the plan's settings."""
    heads = {name: _head_settings(tasks[name], dict(task.settings)) for name, task in plan.tasks.items()}
    shared = {"backbone_kwargs": plan.source.hub_kwargs(), "tokenizer": tokenizer, **plan.model_settings}
    if plan.single:
        (settings,) = heads.values()
        settings.pop("kind")
        # the label-token pooling starts each label's token from its name's tokens, read with the tokenizer
        return MODEL_CLASSES[plan.publishes].from_backbone(plan.source.path, **shared, **settings)
    return PooledForMultiTask.from_backbone(plan.source.path, tasks=heads, **shared)


def _head_settings(task: TaskData, settings: dict[str, Any]) -> dict[str, Any]:
    """A head's config settings: its kind and labels, and the plan's settings of its pooling and head."""
    labels = task.labels
    head = {"kind": task.kind, **settings}
    if labels.names:
        head.update(id2label=labels.id2label, label2id=labels.label2id)
    else:
        head["num_labels"] = labels.num_labels
    if task.kind == SEQUENCE:
        head["problem_type"] = labels.problem_type
    return head


def load_tokenizer(plan: RunPlan):
    source = plan.source
    tokenizer = AutoTokenizer.from_pretrained(
        source.tokenizer, trust_remote_code=False, **source.hub_kwargs()
    )
    if tokenizer.pad_token is None:  # decoders (GPT-2, Llama) have none; the attention mask hides it anyway
        if tokenizer.eos_token is None:
            raise UsageError(f"The tokenizer of {source.path} has neither a pad nor an eos token.")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def backbone_max_length(tokenizer, model) -> int | None:
    """The longest text the model takes: the backbone's position table (less RoBERTa's padding offset) and the
    tokenizer's limit, less the label tokens a label-token pooling inserts into every input (the model itself would
    cut a longer text)."""
    return _limits(tokenizer, model, None).binding()


def _backbone_limit(tokenizer, model) -> int | None:
    """The most tokens the backbone reads in one row: its position table's and the tokenizer's limits."""
    limits = [limit for limit in (_positions(model), _tokenizer_limit(tokenizer)) if limit is not None]
    return min(limits) if limits else None


def _positions(model) -> int | None:
    """The backbone's positions for a row (less RoBERTa's padding offset); None without a position table."""
    backbone = backbone_of(model)
    positions = getattr(backbone.config, "max_position_embeddings", None)
    uses_position_table = getattr(backbone.config, "position_embedding_type", "absolute") == "absolute"
    if isinstance(positions, int) and uses_position_table:
        return positions - position_offset(backbone)
    return None


def _tokenizer_limit(tokenizer) -> int | None:
    limit = tokenizer.model_max_length
    return limit if isinstance(limit, int) and limit < NO_TOKENIZER_LIMIT else None  # unset: a huge sentinel


def check_label_text_lengths(tokenizer, model) -> None:
    """Refuse a label-text head whose label (its name or description) is longer than the backbone reads in one row:
    each label's text runs through the backbone as a row of its own, and a longer one would fail inside it."""
    configs = model.task_configs.values() if isinstance(model, PooledForMultiTask) else [model.config]
    for config in configs:
        if getattr(config, "pooling", None) != "label_text":
            continue
        limit = _backbone_limit(tokenizer, model)
        for index, ids in enumerate(config.label_text_ids or []):
            if limit is not None and len(ids) > limit:
                name = config.id2label[index]
                what = "description" if name in (config.label_descriptions or {}) else "name"
                raise UsageError(
                    f"Label {name!r} is read as {len(ids)} tokens (its {what}, with the marker and the tokenizer's "
                    f"special tokens), more than the {limit} the backbone reads in one row; shorten its {what}."
                )


def choose_max_length(requested: int | None, tokenizer, model, source: ModelSource) -> tuple[int, str]:
    """The run's one text length, and where it comes from: where a run without document mode cuts every text, and
    document mode's window when ``--document_window`` is unset, so a text that fits in one window is read as the cut
    run reads it. ``--max_seq_length``, else a saved model's ``max_seq_length``, else the backbone's limit (its
    tokenizer's ``model_max_length`` or its positions, the smaller); never more than the backbone can read. A
    sentence-transformers folder's ``max_seq_length`` is set aside, and the line says so: it is the length its
    embeddings are served at, not what the backbone reads (EMBEDDING_LENGTH_SET_ASIDE).

    ``model`` None: asked before the model is built (document mode's window), the positions read from the backbone's
    config; the built model then refuses a window past its positions (RoBERTa's padding offset, the label tokens)."""
    limits = _limits(tokenizer, model, source)
    length, origin = (requested, "--max_seq_length") if requested is not None else _stated_length(source)
    embedding_length = length if origin == SENTENCE_TRANSFORMERS_LENGTH else None
    if embedding_length is not None:
        length = None
    if length is None:
        limit = limits.binding()
        if limit is None:
            raise UsageError(
                "The backbone states no maximum input length; set --max_seq_length (in document mode, or "
                "--document_window)."
            )
        # the smaller of the two limits binds (label tokens are taken off either)
        from_tokenizer = limits.tokenizer is not None and (
            limits.positions is None or limits.tokenizer <= limits.positions
        )
        origin = "the tokenizer's model_max_length" if from_tokenizer else "the backbone's positions"
        if embedding_length is not None and embedding_length < limit:
            origin += EMBEDDING_LENGTH_SET_ASIDE.format(length=embedding_length)
        return limit, origin
    limit = limits.longest_text()
    if limit is not None and length > limit:
        logger.warning(
            "max_seq_length=%d is more than the backbone takes; using its limit, %d.", length, limit
        )
        return limit, "the backbone's limit"
    return length, origin


def warn_of_another_length(source: ModelSource, length: int, trains: bool) -> None:
    """Say it when a run reads a saved model's texts at another length than it was trained at: without training, the
    scores are then not the ones the model gives wherever it is used (its saved length, which no copy replaces)."""
    trained = getattr(source.saved, "max_seq_length", None)
    if trained is None or trained == length:
        return
    if trains:
        logger.info(
            "The model was trained at %d tokens; this run trains it further at %d and saves it so.",
            trained,
            length,
        )
        return
    logger.warning(
        "The model was trained at %d tokens (its max_seq_length); this run cuts texts at %d, so its scores are not "
        "the ones the saved model gives: pipeline, encode, ONNX and vLLM cut at %d. Leave --max_seq_length out to "
        "score the model as it is used.",
        trained,
        length,
        trained,
    )


@dataclass(frozen=True)
class _Limits:
    """What bounds a row: the tokenizer's ``model_max_length``, the backbone's positions (None: unstated) and the label
    tokens a pooler inserts into every row."""

    tokenizer: int | None
    positions: int | None
    added_tokens: int = 0

    def binding(self) -> int | None:
        """The longest text both limits allow, less the label tokens (None: neither states one)."""
        limits = [limit for limit in (self.positions, self.tokenizer) if limit is not None]
        return min(limits) - self.added_tokens if limits else None

    def longest_text(self) -> int | None:
        """The most tokens of a text the backbone can read: its position table where it has one, else its
        tokenizer's limit; less the label tokens. Not the tokenizer's limit where a table says more: a tokenizer's
        ``model_max_length`` is a convention, and the one train.py saves is the length it trained at, which a later
        run may change."""
        limit = self.tokenizer if self.positions is None else self.positions
        return None if limit is None else limit - self.added_tokens


def _limits(tokenizer, model, source: ModelSource) -> _Limits:
    """The built model's limits, or (``model`` None) the backbone's as its config states them."""
    if model is None:
        config = AutoConfig.from_pretrained(source.path, trust_remote_code=False, **source.hub_kwargs())
        absolute = getattr(text_config_of(config), "position_embedding_type", "absolute") == "absolute"
        return _Limits(_tokenizer_limit(tokenizer), max_positions_of(config) if absolute else None)
    added = model.added_tokens if isinstance(model, PooledPreTrainedModel) else 0
    return _Limits(_tokenizer_limit(tokenizer), _positions(model), added)


def _stated_length(source: ModelSource) -> tuple[int | None, str]:
    """The length the model states: a saved model's ``max_seq_length``, else its folder's sentence-transformers
    ``max_seq_length`` (which the caller sets aside, naming it)."""
    stated = getattr(source.saved, "max_seq_length", None)
    if stated is not None:
        return stated, "the saved model's max_seq_length"
    try:
        folder = read_sentence_transformers_folder(source.path, **source.hub_kwargs())
    except ValueError as error:
        raise UsageError(str(error)) from error
    if folder is None or folder.max_seq_length is None:
        return None, ""
    return folder.max_seq_length, SENTENCE_TRANSFORMERS_LENGTH


def record_max_length(model, tokenizer, length: int) -> None:
    """Save the run's length with the model: its config's ``max_seq_length`` (pipeline, encode and vLLM read it) and
    its tokenizer's ``model_max_length`` (what ``tokenizer(text, truncation=True)`` cuts at: ONNX Runtime's callers,
    the token-classification pipeline), both written with every checkpoint and the published model."""
    if isinstance(model, PooledPreTrainedModel):  # not a model factory's (the sweep's vanilla baseline)
        model.config.max_seq_length = length
    tokenizer.model_max_length = length


def freeze_backbone(model) -> int:
    """Stop the backbone's gradients; returns the number of frozen parameters."""
    frozen = 0
    for parameter in backbone_of(model).parameters():
        parameter.requires_grad_(False)
        frozen += parameter.numel()
    return frozen


def freeze_heads(model, plan: RunPlan) -> None:
    """Freeze the heads of the tasks whose settings say ``freeze_head``."""
    for name, task in plan.tasks.items():
        if task.spec.freeze_head:
            frozen = 0
            ids = task_head_parameters(model, name)
            for parameter in model.parameters():
                if id(parameter) in ids:
                    parameter.requires_grad_(False)
                    frozen += parameter.numel()
            logger.info("Head of task %r frozen: %d parameters will not be trained.", name, frozen)
