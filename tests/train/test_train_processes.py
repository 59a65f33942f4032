"""train.py as separate processes: killed and resumed, and launched with accelerate on two processes."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import FAST, REPO, leftovers, multi_label_rows, topic_rows, train, write_rows
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from pooled_models import PooledForSequenceClassification
from pooled_models.errors import UsageError

# Every test here starts other processes (a killed run, accelerate launch): slow.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

# Runs train.py's main with a callback that SIGKILLs the process as soon as the first checkpoint is on disk: no
# cleanup code runs, as when a job is pre-empted.
KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from transformers import TrainerCallback
    from pooled_models.train.cli import run

    torch.set_num_threads(int(os.environ["TEST_TORCH_THREADS"]))  # as in the test process: same float reductions

    class KillAfterFirstCheckpoint(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

    run(sys.argv[1:], callbacks=[KillAfterFirstCheckpoint()])
    """
)


def environment():
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}


def test_a_killed_run_resumes_to_the_same_weights(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(40))
    # 5 steps per epoch, 2 epochs; a checkpoint every 3 steps, so the kill lands in the middle of the first epoch
    # and resuming has to skip the batches already seen and restore the dropout RNG.
    settings = [
        "--model_name_or_path",
        tiny_backbone_path,
        "--train_file",
        str(data),
        "--do_train",
        *FAST,
        "--per_device_train_batch_size",
        "8",
        "--num_train_epochs",
        "2",
        "--save_strategy",
        "steps",
        "--save_steps",
        "3",
    ]
    reference = train(tiny_backbone_path, tmp_path / "reference", *settings[2:])

    output_dir = tmp_path / "resumed"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, *settings, "--output_dir", str(output_dir)],
        env={**environment(), "TEST_TORCH_THREADS": str(torch.get_num_threads())},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    work = output_dir.with_name("resumed.incomplete")
    # No half-written output_dir; the lock file stays (SIGKILL runs no cleanup) and the next run sees it is stale.
    assert leftovers(output_dir) == [work, output_dir.with_name("resumed.lock")]
    assert sorted(path.name for path in work.glob("checkpoint-*")) == ["checkpoint-3"]
    assert (work / "checkpoint-3" / "model.safetensors").is_file()

    with pytest.raises(UsageError, match="An interrupted run left checkpoints"):
        train(tiny_backbone_path, output_dir, *settings[2:])
    resumed = train(tiny_backbone_path, output_dir, *settings[2:], "--resume_from_checkpoint", "true")
    assert leftovers(output_dir) == [output_dir]

    expected = load_file(reference.output_dir / "model.safetensors")
    got = load_file(resumed.output_dir / "model.safetensors")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    # A different seed gives different weights, so the equality above is not trivial.
    other = train(tiny_backbone_path, tmp_path / "other", *settings[2:], "--seed", "1")
    other_weights = load_file(other.output_dir / "model.safetensors")
    assert not all(torch.equal(expected[name], other_weights[name]) for name in expected)


def test_resume_refuses_a_checkpoint_without_safetensors(tiny_backbone_path, tmp_path):
    data = write_rows(tmp_path / "train.csv", topic_rows(12))
    pickled = tmp_path / "checkpoint-7"
    pickled.mkdir()
    torch.save({"weight": torch.zeros(1)}, pickled / "pytorch_model.bin")
    with pytest.raises(UsageError, match="holds no model.safetensors"):
        train(
            tiny_backbone_path,
            tmp_path / "out",
            "--train_file",
            str(data),
            "--do_train",
            "--resume_from_checkpoint",
            str(pickled),
        )
    assert leftovers(tmp_path / "out") == []


# The README's commands: data parallel, and FSDP2 sharding each BERT layer (gathered into one file to save).
LAUNCHES = {
    "ddp": ["--multi_gpu"],
    "fsdp": [
        "--use_fsdp",
        "--fsdp_version",
        "2",
        "--fsdp_auto_wrap_policy",
        "TRANSFORMER_BASED_WRAP",
        "--fsdp_transformer_layer_cls_to_wrap",
        "BertLayer",
        "--fsdp_state_dict_type",
        "FULL_STATE_DICT",
    ],
}


def accelerate_command(launch: str, script: Path, *flags: str) -> list[str]:
    return [
        str(Path(sys.executable).parent / "accelerate"),
        "launch",
        *LAUNCHES[launch],
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        str(script),
        *flags,
    ]


def run_on_two_processes(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run an ``accelerate launch`` command and check it succeeded. One thread per process: the two processes then
    share two cores without waiting on each other."""
    result = subprocess.run(
        command,
        env={**environment(), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_accelerate_launch_trains_on_two_processes(tiny_backbone_path, tmp_path, launch):
    train_file = write_rows(tmp_path / "train.csv", topic_rows(64))
    validation_file = write_rows(tmp_path / "validation.csv", topic_rows(20, seed=3))
    output_dir = tmp_path / "out"
    command = accelerate_command(
        launch,
        REPO / "train.py",
        "--model_name_or_path",
        tiny_backbone_path,
        "--train_file",
        str(train_file),
        "--validation_file",
        str(validation_file),
        "--do_train",
        "--do_eval",
        "--output_dir",
        str(output_dir),
        *FAST,
        "--num_train_epochs",
        "2",
        "--per_device_train_batch_size",
        "8",
        "--head_learning_rate",
        "3e-3",
        # The kept training options run on several processes too: layer-wise rates in the optimizer's groups, and
        # the smoothed loss.
        "--layerwise_lr_decay",
        "0.9",
        "--label_smoothing_factor",
        "0.1",
    )
    run_on_two_processes(command, tmp_path)
    metrics = json.loads((output_dir / "all_results.json").read_text())
    assert metrics["world_size"] == 2
    # 64 rows, 8 per process and step: 4 optimizer steps per epoch on two processes (8 on one).
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    model = AutoModelForSequenceClassification.from_pretrained(output_dir)
    assert type(model) is PooledForSequenceClassification
    assert leftovers(output_dir) == [output_dir]
    # The saved weights are the trained ones: they reproduce the validation accuracy of the run.
    from transformers import AutoTokenizer

    from pooled_models.train.evaluation import compute_metrics

    rows = topic_rows(20, seed=3)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    with torch.no_grad():
        logits = model.eval()(
            **tokenizer([row["text"] for row in rows], padding=True, return_tensors="pt")
        ).logits
    labels = [model.config.label2id[row["label"]] for row in rows]
    accuracy = compute_metrics(logits.numpy(), labels, "single_label_classification")["accuracy"]
    assert accuracy == pytest.approx(metrics["eval_accuracy"])


# train.py's run with a callback that prints every process's decision thresholds after each evaluation.
THRESHOLD_REPORTING_RUN = textwrap.dedent(
    """
    import json, sys
    from transformers import TrainerCallback
    from pooled_models.train.cli import run

    class ReportThresholds(TrainerCallback):
        # one file per process: two processes printing to one pipe can interleave their lines
        def on_evaluate(self, args, state, control, model=None, **kwargs):
            with open(f"thresholds-{args.process_index}.jsonl", "a") as handle:
                handle.write(json.dumps(model.config.decision_threshold) + "\\n")

    run(sys.argv[1:], callbacks=[ReportThresholds()])
    """
)


def test_thresholds_tuned_on_two_processes_are_the_same_everywhere_and_fit_all_validation_rows(
    tiny_backbone_path, tmp_path
):
    from pooled_models.thresholds import tune_thresholds

    train_file = write_rows(tmp_path / "train.jsonl", multi_label_rows(64))
    validation_rows = multi_label_rows(
        21, seed=3
    )  # odd: the processes' shares are padded, and gathering drops that
    validation_file = write_rows(tmp_path / "validation.jsonl", validation_rows)
    script = tmp_path / "run_reporting_thresholds.py"
    script.write_text(THRESHOLD_REPORTING_RUN)
    output_dir = tmp_path / "out"
    command = accelerate_command(
        "ddp",
        script,
        "--model_name_or_path",
        tiny_backbone_path,
        "--train_file",
        str(train_file),
        "--validation_file",
        str(validation_file),
        "--do_train",
        "--do_eval",
        "--output_dir",
        str(output_dir),
        *FAST,
        "--num_train_epochs",
        "1",
        "--per_device_train_batch_size",
        "8",
        "--tune_thresholds",
        "per_label",
    )
    run_on_two_processes(command, tmp_path)
    assert json.loads((output_dir / "all_results.json").read_text())["world_size"] == 2
    saved = json.loads((output_dir / "config.json").read_text())["decision_threshold"]
    assert isinstance(saved, list) and len(saved) == 3
    last_seen = {
        process: json.loads((tmp_path / f"thresholds-{process}.jsonl").read_text().splitlines()[-1])
        for process in (0, 1)
    }
    assert last_seen == {0: saved, 1: saved}  # the final evaluation, on each process, at the saved thresholds

    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    with torch.no_grad():
        logits = model(
            **tokenizer([row["text"] for row in validation_rows], padding=True, return_tensors="pt")
        ).logits
    names = [model.config.id2label[index] for index in range(3)]
    targets = [[float(name in row["label"]) for name in names] for row in validation_rows]
    assert saved == pytest.approx(
        tune_thresholds(torch.sigmoid(logits).numpy(), targets, per_label=True), abs=1e-4
    )


# train.py's run with the Trainer's loss recording, per process, the task of each training batch.
TASK_RECORDING_RUN = textwrap.dedent(
    """
    import json, sys
    from pooled_models.train.trainer import PooledTrainer
    from pooled_models.train.cli import run

    original = PooledTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        if model.training:
            with open(f"tasks-{self.args.process_index}.jsonl", "a") as handle:
                handle.write(json.dumps([self.state.global_step, inputs["task"], len(inputs["input_ids"])]) + "\\n")
        return original(self, model, inputs, *args, **kwargs)

    PooledTrainer.compute_loss = recording
    run(sys.argv[1:])
    """
)


def test_a_multitask_run_on_two_processes_trains_one_task_per_step_everywhere(tiny_backbone_path, tmp_path):
    import yaml
    from helpers import entity_rows

    from pooled_models import PooledForMultiTask

    files = {
        split: write_rows(tmp_path / f"{split}.jsonl", entity_rows(size, seed))
        for split, (size, seed) in {"train": (40, 0), "validation": (12, 1)}.items()
    }
    small = write_rows(tmp_path / "small.jsonl", entity_rows(12, 5))
    config = {
        "task_sampling": "temperature",
        "tasks": {
            "topic": {
                "kind": "sequence",
                "train_file": str(files["train"]),
                "validation_file": str(files["validation"]),
            },
            "places": {
                "kind": "token",
                "train_file": str(small),
                "validation_file": str(files["validation"]),
            },
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    script = tmp_path / "run_recording_tasks.py"
    script.write_text(TASK_RECORDING_RUN)
    output_dir = tmp_path / "out"
    command = accelerate_command(
        "ddp",
        script,
        str(tmp_path / "config.yaml"),
        "--model_name_or_path",
        tiny_backbone_path,
        "--do_train",
        "--do_eval",
        "--output_dir",
        str(output_dir),
        *FAST,
        "--num_train_epochs",
        "2",
        "--per_device_train_batch_size",
        "4",
    )
    run_on_two_processes(command, tmp_path)
    metrics = json.loads((output_dir / "all_results.json").read_text())
    assert metrics["world_size"] == 2 and "eval_places_f1" in metrics and "eval_topic_f1_macro" in metrics
    steps = [
        [json.loads(line) for line in (tmp_path / f"tasks-{process}.jsonl").read_text().splitlines()]
        for process in (0, 1)
    ]
    # The same task on both processes at every step, both tasks trained, each process its own rows.
    assert [(step, task) for step, task, _ in steps[0]] == [(step, task) for step, task, _ in steps[1]]
    assert {task for _, task, _ in steps[0]} == {"topic", "places"}
    state = json.loads((output_dir / "trainer_state.json").read_text())
    # 40 + 12 rows in batches of 4: 13 batches an epoch, in pairs (one per process): 7 steps an epoch.
    assert state["global_step"] == 14 and len(steps[0]) == 14
    model = PooledForMultiTask.from_pretrained(output_dir)
    assert set(model.config.tasks) == {"topic", "places"}
    assert leftovers(output_dir) == [output_dir]
