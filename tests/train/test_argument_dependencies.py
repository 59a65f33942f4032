"""Nothing a user gives train.py is dropped without a word (arguments/dependencies.py): a validation or test file
turns its phase on, and every other setting that takes effect only with another is refused without it, by name, with
what it needs. Each setting of DEPENDENCIES is tried both ways: refused without each thing it needs, accepted with
all of them (the control that shows the refusal is about the missing partner)."""

import dataclasses
import json

import pytest
import yaml
from transformers import TrainingArguments

from pooled_models.errors import UsageError
from pooled_models.train.arguments import (
    DataArguments,
    ModelArguments,
    PooledTrainingArguments,
    parse_arguments,
    parser,
    pooled_config_fields,
)
from pooled_models.train.arguments import dependencies as deps
from pooled_models.train.tasks import task_specs

TASKS = json.dumps({"topic": {"kind": "sequence", "train_file": "t.csv"}})

# Each requirement: (flags that meet it, flags that break it where the default meets it).
MEETS = {
    deps.TRAINING: (["--do_train"], []),
    deps.EVALUATION: (["--do_eval"], []),
    deps.PREDICTION: (["--do_predict"], []),
    deps.EVALUATION_OR_PREDICTION: (["--do_predict"], []),
    deps.HUB_DATASET: (["--dataset_name", "some/dataset"], []),
    deps.TOKEN_RUN: (["--tags_column", "tags"], []),
    deps.SEQUENCE_RUN: ([], ["--tags_column", "tags"]),
    deps.SINGLE_SEQUENCE_RUN: ([], ["--tags_column", "tags"]),
    deps.MULTI_TASK_RUN: (["--tasks", TASKS], []),
    deps.ZERO_SHOT_RUN: (["--zero_shot_file", "z.csv"], []),
    deps.TEMPERATURE_SAMPLING: (["--task_sampling", "temperature"], []),
    deps.THRESHOLD_TUNING: ([], ["--tune_thresholds", "none"]),
    deps.EVALUATING_BY_STEPS: (["--eval_strategy", "steps", "--do_train"], []),
    deps.SAVING_BY_STEPS: (["--save_strategy", "steps", "--do_train"], []),
    deps.PUSHING: (["--push_to_hub"], []),
    deps.KEEPING_THE_BEST: (["--do_train", "--do_eval", "--load_best_model_at_end"], []),
}

# A value for each setting (flags after it where it needs more than its requirements to parse).
VALUES = {
    "train_file": ["t.csv"],
    "max_train_samples": ["5"],
    "learning_rate": ["1e-4"],
    "head_learning_rate": ["1e-3"],
    "label_embedding_learning_rate": ["1e-3"],
    "label_embedding_weight_decay": ["0.1"],
    "num_train_epochs": ["2"],
    "max_steps": ["10"],
    "max_tokens_per_batch": ["512"],
    "pad_to_buckets": ["true"],
    "length_buckets": ["4"],
    "logging_nan_inf_filter": ["true"],
    "document_mode": ["true"],
    "max_windows_per_document": ["4"],
    "window_keeping": ["spread"],
    "max_windows_per_batch": ["64"],
    "document_gate_learning_rate": ["0.05"],
    "eval_max_windows": ["8"],
    "per_device_train_batch_size": ["4"],
    "gradient_accumulation_steps": ["2"],
    "warmup_steps": ["0.2"],
    "weight_decay": ["0.1"],
    "lr_scheduler_type": ["cosine"],
    "optim": ["adamw_torch"],
    "max_grad_norm": ["0.5"],
    "train_sampling_strategy": ["random"],
    "freeze_backbone": ["true"],
    "layerwise_lr_decay": ["0.9"],
    "label_smoothing_factor": ["0.1"],
    "early_stopping_patience": ["2", "--do_eval"],
    "resume_from_checkpoint": ["true"],
    "keep_checkpoints": ["true"],
    "save_strategy": ["epoch"],
    "save_total_limit": ["3"],
    "eval_strategy": ["epoch"],
    "logging_steps": ["10"],
    "gradient_checkpointing": ["true"],
    "skip_unseen_labels": ["true"],
    "per_device_eval_batch_size": ["8"],
    "eval_accumulation_steps": ["2"],
    "length_sorted_eval": ["false"],
    "text_column": ["sentence"],
    "text_pair_column": ["second"],
    "label_column": ["topic"],
    "problem_type": ["multi_label_classification"],
    "label_separator": ["|"],
    "max_eval_samples": ["5"],
    "max_predict_samples": ["5"],
    "keep_columns": ["id"],
    "dataset_config_name": ["en"],
    "train_split_name": ["training"],
    "validation_split_name": ["dev"],
    "test_split_name": ["held_out"],
    "words_column": ["tokens"],
    "label_all_subtokens": ["true"],
    "zero_shot_file": ["unseen.csv"],
    "threshold_average": ["macro"],
    "task_sampling": ["round_robin"],
    "sampling_alpha": ["0.3"],
    "eval_steps": ["10", "--do_eval"],
    "save_steps": ["10"],
    "hub_model_id": ["me/model"],
    "hub_strategy": ["end"],
    "hub_private_repo": ["true"],
    "metric_for_best_model": ["accuracy"],
    "greater_is_better": ["true"],
    "seen_label_margin": ["1.5"],
}


def argv_for(setting: str, requirements, broken=None) -> list[str]:
    argv = ["--output_dir", "out", f"--{setting}", *VALUES[setting]]
    for needs in requirements:
        meets, breaks = MEETS[needs]
        argv += breaks if needs is broken else meets
    return argv


def cases():
    for setting, requirements in deps.DEPENDENCIES.items():
        for needs in requirements:
            yield pytest.param(setting, needs, id=f"{setting}-without-{needs.what.split(' ')[0]}")


def test_every_setting_with_a_requirement_is_a_flag_and_has_a_value_here():
    flags = {action.dest for action in parser()._actions}
    named = set(deps.DEPENDENCIES) | set(deps.TASK_DEPENDENCIES) | set(deps.IMPLIED_PHASES)
    assert sorted(named - flags) == []
    assert sorted(set(deps.DEPENDENCIES) - set(VALUES)) == []


# train.py's own arguments that take effect in every run they are given to, and why (the others are in DEPENDENCIES,
# or are PooledConfig settings, which the config refuses for a part that does not read them).
ALWAYS_READ = {
    "model_name_or_path": "the model",
    "tokenizer_name": "the tokenizer",
    "model_revision": "the model's revision",
    "cache_dir": "where downloads go",
    "dataset_name": "the data",
    "validation_file": "turns --do_eval on",
    "test_file": "turns --do_predict on",
    "label_description_column": "refused without training, or in a token task, by data/descriptions.py",
    "max_seq_length": "every tokenization",
    "example_texts": "answered after saving",
    "tags_column": "makes the run a token-classification run",
    "tasks": "makes the run a multi-task run",
    "dataloader_pin_memory": "every dataloader",
    "dataloader_num_workers": "every dataloader",
    "overwrite_output_dir": "the output folder",
    "tune_thresholds": "refused where it cannot tune, by evaluation.plan_thresholds",
    "padding_free": "every dataloader's batches: training, evaluation and prediction",
    "pad_to_multiple_of": "every padded batch: training, evaluation and prediction",
}


def test_every_argument_of_train_py_is_read_in_every_run_or_refused_without_its_partner():
    """The systematic list: a new argument must be placed in DEPENDENCIES or in ALWAYS_READ."""
    inherited = {item.name: item for item in dataclasses.fields(TrainingArguments)}
    own = [
        item.name
        for item in dataclasses.fields(PooledTrainingArguments)
        if item.name not in inherited or item.default != inherited[item.name].default
    ]
    config = {item.name for item in pooled_config_fields()}
    names = [item.name for cls in (ModelArguments, DataArguments) for item in dataclasses.fields(cls)] + own
    unplaced = [
        name for name in names if name not in deps.DEPENDENCIES and name not in set(ALWAYS_READ) | config
    ]
    assert unplaced == []


@pytest.mark.parametrize("setting, needs", cases())
def test_a_setting_is_refused_without_what_it_needs_and_accepted_with_it(setting, needs):
    requirements = deps.DEPENDENCIES[setting]
    model, data, training = parse_arguments(argv_for(setting, requirements))  # the control: accepted
    assert all(requirement.holds(model, data, training) for requirement in requirements)
    with pytest.raises(UsageError) as error:
        parse_arguments(argv_for(setting, requirements, broken=needs))
    assert f"{setting} is set, but it takes effect only with {needs.what}" in str(error.value)


@pytest.mark.parametrize(
    "given, phase",
    [
        (["--validation_file", "v.csv"], "do_eval"),
        (["--test_file", "t.csv"], "do_predict"),
        (["--dataset_name", "d", "--validation_split_name", "dev"], "do_eval"),
    ],
)
def test_a_file_named_for_evaluation_or_prediction_turns_that_phase_on(given, phase):
    _, _, training = parse_arguments(["--output_dir", "out", "--do_train", *given])
    assert getattr(training, phase) is True and training.implied_phases == {phase: given[-2].lstrip("-")}
    if phase == "do_eval":  # and evaluation follows from it as from --do_eval: every epoch
        assert str(training.eval_strategy.value) == "epoch"
    _, _, plain = parse_arguments(["--output_dir", "out", "--do_train"])
    assert getattr(plain, phase) is False and plain.implied_phases == {}


def test_a_phase_set_false_next_to_its_file_is_refused(tmp_path):
    with pytest.raises(
        UsageError, match="validation_file is set, but do_eval is false, so it would not be read"
    ):
        parse_arguments(
            ["--output_dir", "o", "--do_train", "--validation_file", "v.csv", "--do_eval", "false"]
        )
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({"output_dir": "o", "do_train": True, "do_predict": False, "test_file": "t"})
    )
    with pytest.raises(UsageError, match="test_file is set, but do_predict is false"):
        parse_arguments([str(config)])
    tasks = {"a": {"kind": "sequence", "train_file": "t.csv", "validation_file": "v.csv"}}
    config.write_text(yaml.safe_dump({"output_dir": "o", "do_train": True, "do_eval": False, "tasks": tasks}))
    with pytest.raises(UsageError, match=r"tasks\['a'\].validation_file is set, but do_eval is false"):
        parse_arguments([str(config)])


def test_a_tasks_own_settings_need_their_phase(tmp_path):
    config = tmp_path / "run.yaml"
    tasks = {"a": {"kind": "sequence", "train_file": "t.csv", "max_eval_samples": 3}}
    config.write_text(yaml.safe_dump({"output_dir": "o", "do_train": True, "tasks": tasks}))
    with pytest.raises(
        UsageError, match=r"tasks\['a'\]: max_eval_samples is set, but it takes effect only with"
    ):
        parse_arguments([str(config)])
    tasks["a"]["validation_file"] = "v.csv"  # the control: its validation file turns evaluation on
    config.write_text(yaml.safe_dump({"output_dir": "o", "do_train": True, "tasks": tasks}))
    assert parse_arguments([str(config)])[2].do_eval


def test_a_setting_of_the_sequence_head_is_refused_in_a_token_run():
    model, data, _ = parse_arguments(
        ["--output_dir", "o", "--do_train", "--tags_column", "tags", "--pooling", "max"]
    )
    from pooled_models.train.arguments import chosen_model_settings

    with pytest.raises(UsageError, match="pooling does not apply to a token-classification run"):
        task_specs(data, chosen_model_settings(model))
    model, data, _ = parse_arguments(["--output_dir", "o", "--do_train", "--tags_column", "tags"])
    assert task_specs(data, chosen_model_settings(model))[0].kind == "token"
