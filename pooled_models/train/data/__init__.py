"""The data of a run, task by task: a task spec -> its splits read and checked, its label space, a label-text task's
label descriptions (descriptions.py), and its splits tokenized (sequence.py for sequence tasks, token.py for token
tasks; batching.py and multitask.py make batches of them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import DataError, UsageError
from ...modeling.configuration_multitask import TOKEN, PooledMultiTaskConfig
from .descriptions import check_descriptions_apply, task_descriptions
from .multitask import with_task_name
from .sequence import Labels, Split, prepare_splits, tokenize
from .token import TokenLabels, prepare_token_splits, tokenize_words

if TYPE_CHECKING:  # an annotation only
    from ..tasks import TaskSpec

__all__ = ["TaskData", "read_task", "tokenize_task", "saved_labels", "check_token_ids"]


@dataclass
class TaskData:
    """One task of the run: its settings, its checked splits and its label space; ``max_length`` once tokenized."""

    spec: TaskSpec
    splits: dict[str, Split]
    labels: Labels | TokenLabels
    columns: tuple[str, str] | None = None  # a token task's (words, tags) columns
    descriptions: dict[str, str] | None = None  # a label-text task's label -> description, from every source
    max_length: int = 0
    encoded: dict[str, object] = field(default_factory=dict)  # split -> the rows the Trainer reads

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def problem_type(self) -> str:
        return "token" if self.kind == TOKEN else self.labels.problem_type


def _saved_config(spec: TaskSpec, saved):
    """The saved model's config of this task (None when the run starts from a backbone). The plan has checked that
    the saved model has this task, of this kind."""
    if saved is None:
        return None
    return saved.task_config(spec.name) if isinstance(saved, PooledMultiTaskConfig) else saved


def saved_labels(spec: TaskSpec, saved) -> Labels | TokenLabels | None:
    """The label space of the model the run starts from, for this task (None when it starts from a backbone)."""
    config = _saved_config(spec, saved)
    if config is None:
        return None
    if spec.kind == TOKEN:
        return TokenLabels.from_config(config.id2label)
    return Labels.from_config(config, spec.data.problem_type)


def read_task(spec: TaskSpec, roles: list[str], saved, cache_dir: str | None, alone: bool) -> TaskData:
    """The task's ``roles`` splits read and checked, with its label space (from training, or ``saved``'s) and its
    label descriptions. The errors of a task among several name it."""
    labels = saved_labels(spec, saved)
    try:
        check_descriptions_apply(spec, _saved_config(spec, saved))
        if spec.kind == TOKEN:
            splits, labels, columns = prepare_token_splits(spec.data, roles, labels, cache_dir=cache_dir)
            return TaskData(spec, splits, labels, columns)
        splits, labels = prepare_splits(spec.data, roles, labels, cache_dir=cache_dir)
        descriptions = task_descriptions(spec, splits, labels, cache_dir)
        return TaskData(spec, splits, labels, descriptions=descriptions)
    except UsageError as error:  # a DataError stays one
        if alone:
            raise
        raise type(error)(f"task {spec.name!r}: {error}") from error


def tokenize_task(task: TaskData, tokenizer, max_length: int, named: bool) -> None:
    """Tokenize every split of ``task`` (at most ``max_length`` tokens), into ``task.encoded``; ``named``: each row
    also names its task (what a multi-task model's batches need)."""
    task.max_length = max_length
    data = task.spec.data
    for name, split in task.splits.items():
        if task.kind == TOKEN:
            tokenize_words(
                split, tokenizer, task.columns[0], task.labels, max_length, data.label_all_subtokens
            )
        else:
            tokenize(split, tokenizer, data.text_column, data.text_pair_column, max_length)
        task.encoded[name] = with_task_name(split.encoded, task.name) if named else split.encoded


def check_token_ids(task: TaskData, vocabulary: int) -> None:
    """Every token id of the task's tokenized splits has a row in the model's embedding table, checked column-wise
    once, so that training can run without the model reading ids back from the device at every step
    (modeling/inputs.py, values_checked_by_caller)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name, rows in task.encoded.items():
        column = rows.data.column("input_ids")
        flat = pc.list_flatten(column)
        if len(flat) and pa.types.is_list(flat.type):  # document mode: [document][window][token]
            flat = pc.list_flatten(flat)
        highest = pc.max(flat).as_py() if len(flat) else None
        if highest is not None and highest >= vocabulary:
            raise DataError(
                f"The {name} split tokenizes to token id {highest}, but the model's vocabulary has {vocabulary} "
                "entries: the tokenizer does not match the model. Load both from the same folder, or resize the "
                "model's embeddings to the tokenizer (model.resize_token_embeddings(len(tokenizer)))."
            )
