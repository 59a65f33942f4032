"""The data arguments: where each split comes from (local files or a Hub dataset), its columns, the label checks,
row limits, token-classification columns and the tasks of a multi-task run (a config file's ``tasks`` mapping,
turned into task specs by ``tasks.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ...errors import UsageError
from ...modeling.problem_types import PROBLEM_TYPES
from .defaults import DEFAULT_KEPT_COLUMN
from .model import JSONValue

__all__ = ["DataArguments"]


@dataclass
class DataArguments:
    _argument_group_name = "data"

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A dataset on the Hugging Face Hub (or anything else load_dataset reads)."},
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The configuration of dataset_name."}
    )
    train_split_name: str = field(default="train", metadata={"help": "Split of dataset_name to train on."})
    validation_split_name: str = field(
        default="validation", metadata={"help": "Split of dataset_name to evaluate on."}
    )
    test_split_name: str = field(
        default="test", metadata={"help": "Split of dataset_name to test and predict on."}
    )
    train_file: str | None = field(
        default=None, metadata={"help": "A .csv, .tsv, .json, .jsonl or .parquet file."}
    )
    validation_file: str | None = field(default=None, metadata={"help": "Same formats as train_file."})
    test_file: str | None = field(
        default=None,
        metadata={"help": "Same formats as train_file; its label column is optional (prediction only)."},
    )
    zero_shot_file: str | None = field(
        default=None,
        metadata={
            "help": "Zero-shot evaluation of a label_text model with label_text_scorer shared: a file (same formats "
            "as train_file, its text_column and label_column) whose labels need not be the model's. Each row is "
            "scored against every label of the file, by the trained model and by the model before training (for a "
            "new model, the backbone's cosine similarity), and both accuracies and macro-F1s are reported and put "
            "in the model card."
        },
    )
    seen_label_margin: str = field(
        default="auto",
        metadata={
            "help": "With zero_shot_file: the number taken off the score of every label the model was trained on "
            "wherever it is asked (calibrated stacking), so that a new label asked together with them competes as "
            "before training; saved with the model (label_text_seen_margin), which the pipelines and vLLM apply. "
            "'auto': tuned after training on the validation rows asked against the trained labels and the zero-shot "
            "file's unseen label names (never its rows): the largest margin that keeps 90%% of their accuracy "
            "(bench/generalized_zero_shot.py chose it; where it cannot tune, the model keeps its own); a number: "
            "that margin (0: none). Without zero_shot_file the model keeps label_text_seen_margin's default, 1.5."
        },
    )
    text_column: str = field(default="text", metadata={"help": "The column holding the text."})
    text_pair_column: str | None = field(
        default=None, metadata={"help": "A second text column, for sentence-pair tasks (encoded as a pair)."}
    )
    label_column: str = field(default="label", metadata={"help": "The column holding the label."})
    label_description_column: str | None = field(
        default=None,
        metadata={
            "help": "label_text only. A column of the training file holding, on each row, the description of "
            "that row's label (multi-label: a list as long as the row's list of labels, item by item); null or empty "
            "where a row gives none. A label's description must be the same on every row that gives one; labels "
            "without one are read as their names. Merged with label_descriptions: a label both describe must get "
            "the same text from each."
        },
    )
    problem_type: Literal[
        "auto", "single_label_classification", "multi_label_classification", "regression"
    ] = field(
        default="auto",
        metadata={
            "help": "auto: detected from the label column (strings or integers: single-label; lists: multi-label; "
            "floats: regression)."
        },
    )
    label_separator: str | None = field(
        default=None,
        metadata={
            "help": "Multi-label labels given as one string per row, e.g. 'joy|fear' with '|' (csv files)."
        },
    )
    skip_unseen_labels: bool = field(
        default=False,
        metadata={
            "help": "Drop validation/test rows whose label never occurs in training (default: an error)."
        },
    )
    max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": "Truncate texts to this many tokens. Defaults to, and is capped at, the backbone's limit."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N training rows."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N validation rows."}
    )
    max_predict_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N test rows."}
    )
    keep_columns: list[str] | None = field(
        default=None,
        metadata={
            "help": "Columns of the test file copied into each row of predictions.jsonl, next to the prediction, so "
            "that results join back by key rather than by row order (e.g. --keep_columns id source). Default: the "
            f"column '{DEFAULT_KEPT_COLUMN}', when the test file has one."
        },
    )
    example_texts: list[str] | None = field(
        default=None,
        metadata={
            "help": "After saving, classify these texts with pipeline() from the saved folder and print them."
        },
    )
    # Token classification and multi-task runs (train/data/token.py, train/data/__init__.py; docs/multitask.md).
    tags_column: str | None = field(
        default=None,
        metadata={
            "help": "Token classification (NER, tagging): the column holding each row's tags, one per word; setting "
            "it makes the run a token-classification run. CoNLL files (.conll) are read into the columns 'words' "
            "and 'tags'."
        },
    )
    words_column: str = field(
        default="words",
        metadata={"help": "Token classification: the column holding each row's words (a list of strings)."},
    )
    label_all_subtokens: bool = field(
        default=False,
        metadata={
            "help": "Token classification: give every sub-token of a word the word's tag (B- continued as I-), "
            "not only the first (the default; the others are then left out of the loss and the metrics)."
        },
    )
    tasks: JSONValue | None = field(
        default=None,
        metadata={
            "help": "Multi-task: task name -> its kind (sequence or token), data files and columns, head settings "
            "and training settings (loss_weight, head_learning_rate, start_epoch, freeze_head). Given in a config "
            "file; see docs/multitask.md."
        },
    )

    def files(self) -> dict[str, str | None]:
        """The local file of each split: ``{"train": ..., "validation": ..., "test": ...}`` (None where not given)."""
        return {"train": self.train_file, "validation": self.validation_file, "test": self.test_file}

    def __post_init__(self):
        valid = ("auto", *PROBLEM_TYPES)
        if self.problem_type not in valid:
            raise UsageError(
                f"Unknown problem_type {self.problem_type!r}. Valid choices: {', '.join(valid)}."
            )
        local = [self.train_file, self.validation_file, self.test_file]
        if self.dataset_name and any(local):
            raise UsageError(
                "Give either dataset_name (a Hub dataset) or local files (train_file...), not both."
            )
        if self.max_seq_length is not None and self.max_seq_length < 1:
            raise UsageError(f"max_seq_length must be >= 1, got {self.max_seq_length}.")
        if self.label_separator == "":
            raise UsageError("label_separator must not be empty.")
        if self.tasks is not None and self.tags_column is not None:
            raise UsageError(
                "tags_column names the tags of a single-task run; in a multi-task run, set it per task."
            )
