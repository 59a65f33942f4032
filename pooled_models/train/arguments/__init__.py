"""train.py's arguments: the model's (the backbone and every PooledConfig setting), the data's and the training's,
each a dataclass of typed fields with help text, read from a config file and flags (``parse_arguments``). Nothing
here is written once parsed: what a run works out from them is its plan (``plan.py``)."""

from .data import DataArguments
from .model import (
    FROM_TRAINING_DATA,
    TRAIN_PY_DEFAULTS,
    JSONValue,
    ModelArguments,
    chosen_model_settings,
    parse_pos_weight,
    pooled_config_fields,
)
from .parsing import (
    CONFIG_FILE_SUFFIXES,
    DEMO_FLAG,
    REFUSED_KEYS,
    help_command,
    parse_arguments,
    parser,
    program,
    read_config_file,
)
from .training import (
    HEAD_LEARNING_RATE,
    MAX_DEFAULT_EPOCHS,
    MIN_TRAIN_STEPS,
    NUM_TRAIN_EPOCHS,
    SAMPLING_STRATEGIES,
    THRESHOLD_TUNING,
    TRAIN_BATCH_SIZE,
    PooledTrainingArguments,
    uses_an_accelerator,
)

__all__ = [
    "DataArguments",
    "ModelArguments",
    "PooledTrainingArguments",
    "JSONValue",
    "FROM_TRAINING_DATA",
    "TRAIN_PY_DEFAULTS",
    "chosen_model_settings",
    "parse_pos_weight",
    "pooled_config_fields",
    "CONFIG_FILE_SUFFIXES",
    "DEMO_FLAG",
    "REFUSED_KEYS",
    "help_command",
    "parse_arguments",
    "parser",
    "program",
    "read_config_file",
    "HEAD_LEARNING_RATE",
    "NUM_TRAIN_EPOCHS",
    "MIN_TRAIN_STEPS",
    "MAX_DEFAULT_EPOCHS",
    "SAMPLING_STRATEGIES",
    "THRESHOLD_TUNING",
    "TRAIN_BATCH_SIZE",
    "uses_an_accelerator",
]
