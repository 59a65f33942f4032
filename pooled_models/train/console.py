"""Everything a run prints. Quiet by default: what was read, what was built, one progress bar per phase (train,
evaluate, predict) with one line per evaluation during training, then the summary: the scores, where the model went,
the saved model's answers for the example texts and how to use it. The libraries'
chatter stays out: accelerate's INFO lines, datasets' and transformers' loading and writing bars, Trainer's nested
evaluation bars and its metrics dumps. ``--log_level info`` (or ``debug``), transformers' own flag, brings all of it
back as transformers' examples print it.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import transformers
from tqdm.auto import tqdm
from transformers import PrinterCallback, ProgressCallback, TrainerCallback
from transformers.trainer_utils import has_length

from ..modeling.modeling_token import PooledForTokenClassification

__all__ = [
    "VERBOSE_LEVELS",
    "is_verbose",
    "set_up_logging",
    "quiet_libraries",
    "RunProgress",
    "install_progress",
    "shown_metrics",
    "short_list",
    "count",
    "say",
    "describe_tasks",
    "describe_model",
    "describe_length",
    "print_summary",
    "answer_text",
]

# The --log_level values that bring back the libraries' logs and transformers' own progress bars.
VERBOSE_LEVELS = ("debug", "info")

# Loggers whose INFO lines are library chatter in a quiet run ("The used dataset had no length, returning gathered
# tensors. You should drop the remainder yourself." is accelerate's note to Trainer, not to the user).
CHATTY_LOGGERS = ("accelerate", "datasets")


def is_verbose(training_args) -> bool:
    return str(getattr(training_args, "log_level", "passive")) in VERBOSE_LEVELS


class PlainFormatter(logging.Formatter):
    """Our INFO lines as sentences; warnings and errors with their level, as a command-line tool says them."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno == logging.INFO else f"{record.levelname.lower()}: {message}"


def set_up_logging(training_args) -> None:
    """Quiet: pooled_models' own INFO lines (the decisions a run takes for the user) and every library's warnings,
    as plain lines. Verbose: every library's INFO lines with time and logger, as transformers' examples log."""
    level = training_args.get_process_log_level()
    ours = logging.INFO if training_args.should_log else level
    if is_verbose(training_args):
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)
    else:
        root = logging.getLogger()
        if not root.handlers:  # an application's (or pytest's) own logging setup is left as it is
            handler = logging.StreamHandler()
            handler.setFormatter(PlainFormatter())
            root.addHandler(handler)
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(max(logging.WARNING, level))
    logging.getLogger("pooled_models").setLevel(ours)
    transformers.utils.logging.set_verbosity(level)


@contextmanager
def quiet_libraries(verbose: bool):
    """Unless ``verbose``: transformers' ("Loading weights", "Writing model shards") and datasets' ("Generating data
    split", map) progress bars off, and as they were afterwards, for a caller that runs more in the same process."""
    if verbose:
        yield
        return
    import datasets

    transformers_bars = transformers.utils.logging.is_progress_bar_enabled()
    datasets_bars = not datasets.utils.are_progress_bars_disabled()
    transformers.utils.logging.disable_progress_bar()
    datasets.utils.disable_progress_bars()
    try:
        yield
    finally:
        if transformers_bars:
            transformers.utils.logging.enable_progress_bar()
        if datasets_bars:
            datasets.utils.enable_progress_bars()


# Metrics that say how long something took, not how good the model is.
TIMINGS = ("runtime", "per_second", "flos", "preparation_time")


def shown_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The evaluation and test scores of ``metrics``, without timings and the epoch."""
    return {
        key: value
        for key, value in metrics.items()
        if key.startswith(("eval_", "test_", "zero_shot_"))
        and not key.endswith(TIMINGS)
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    }


# Left out of the line per evaluation (the summary shows them): a token task's precision and recall (its F1 sums them
# up) and each task's loss where the run's mean loss is there.
EPOCH_LINE_LEAVES_OUT = ("_precision", "_recall")


def epoch_metrics(logs: dict[str, Any]) -> dict[str, float]:
    scores = shown_metrics(logs)
    return {
        key: value
        for key, value in scores.items()
        if not key.endswith(EPOCH_LINE_LEAVES_OUT)
        and not (key.endswith("_loss") and key != "eval_loss" and "eval_loss" in scores)
    }


def short_list(names: list[str], shown: int = 8) -> str:
    """``a, b, c`` or, for a long list, its first ``shown`` names and how many there are."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])}, ... ({len(names)} in all)"


def plural(number: int, noun: str, nouns: str | None = None) -> str:
    """``1 row``, ``2 rows``; ``nouns`` where the plural is not ``noun + "s"`` (``1 batch``, ``3 batches``)."""
    return f"{number} {noun if number == 1 else nouns or noun + 's'}"


def epochs_text(epochs: float) -> str:
    """How many passes a run made: ``1 epoch``, ``4 epochs``, ``0.15 epochs`` (a run stopped by max_steps or early
    stopping ends within an epoch; two decimals say how far)."""
    rounded = round(float(epochs), 2)
    if rounded.is_integer():
        return plural(int(rounded), "epoch")
    return f"{rounded:g} epochs"


def count(number: int) -> str:
    """A parameter count as people say it: 22.7M, 410K, 950."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if number >= size:
            return f"{number / size:.1f}{suffix}"
    return str(number)


class RunProgress(TrainerCallback):
    """One progress bar per phase in place of transformers' ProgressCallback, whose evaluation bar opens inside the
    training bar at every evaluation and interleaves with it: training shows one bar (its postfix the last logged
    loss) and one line per evaluation; a final evaluation or prediction shows one bar of its own, over every task of
    a multi-task run. ``disable_tqdm`` drops the bars and keeps lines in their place: one per logged training loss and
    one per epoch (a long epoch is not a silent one), one per evaluation, and one when a final phase ends."""

    def __init__(self):
        self.bar = None
        self.phase = "evaluate"
        self.training = False
        self.done = 0
        self.batches = 0  # of the final phase running
        self.quiet = False  # its bar is disabled (--disable_tqdm)
        self.loader = (
            None  # the evaluation dataloader the bar counts (a multi-task evaluation has one per task)
        )

    def _open(self, args, description: str, total: int | None, unit: str):
        self.quiet = bool(args.disable_tqdm)
        return tqdm(
            total=total, desc=description, unit=unit, dynamic_ncols=True, disable=bool(args.disable_tqdm)
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.loader = None, None

    @contextmanager
    def running(self, phase: str):
        """A final evaluation or prediction: its batches fill one bar named ``phase``, closed at the end."""
        self.phase = phase
        try:
            self.batches, self.quiet = 0, False
            yield
            if self.quiet:  # no bar was shown: a line says the phase is done
                print(f"{phase}: done, {plural(self.batches, 'batch', 'batches')}", flush=True)
        finally:
            self.close()
            self.phase = "evaluate"

    def on_train_begin(self, args, state, control, **kwargs):
        self.training, self.done = True, state.global_step
        if state.is_world_process_zero:
            self.bar = self._open(args, "train", state.max_steps, "step")
            self.bar.update(state.global_step)  # a resumed run starts where its checkpoint was

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.done)
        self.done = state.global_step

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        if self.training or not state.is_world_process_zero:
            return  # evaluations during training are one line each (on_log)
        batches = len(eval_dataloader) if has_length(eval_dataloader) else None
        if self.bar is None:
            self.bar = self._open(args, self.phase, batches, "batch")
        elif (
            eval_dataloader is not self.loader
        ):  # a multi-task run's next task: its batches join the same bar
            self.bar.total = self.bar.total + batches if self.bar.total is not None and batches else None
            self.bar.refresh()
        self.loader = eval_dataloader
        self.bar.update(1)
        self.batches += 1

    def on_evaluate(self, args, state, control, **kwargs):
        if not self.training:
            self.close()

    def on_predict(self, args, state, control, **kwargs):
        self.close()

    def on_epoch_end(self, args, state, control, **kwargs):
        # Without bars, the end of an epoch is a line; an evaluation every epoch prints its own (on_log).
        if (
            self._quiet_training(args, state)
            and str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "epoch"
        ):
            print(f"epoch {state.epoch:g}: step {state.global_step} of {state.max_steps}", flush=True)

    def _quiet_training(self, args, state) -> bool:
        return self.training and bool(args.disable_tqdm) and state.is_world_process_zero

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "loss" in logs and self.bar is not None:
            self.bar.set_postfix(loss=f"{logs['loss']:.4g}", refresh=False)
        if "loss" in logs and self._quiet_training(args, state):
            print(f"step {state.global_step} of {state.max_steps}: loss {logs['loss']:.4g}", flush=True)
        scores = epoch_metrics(logs)
        if self.training and scores:
            epoch = f"epoch {state.epoch:g}" if state.epoch is not None else f"step {state.global_step}"
            line = f"{epoch}: " + ", ".join(f"{key} {value:.4g}" for key, value in sorted(scores.items()))
            (self.bar.write if self.bar is not None else print)(line)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()
        self.training = False


def install_progress(trainer) -> RunProgress | None:
    """Replace transformers' progress output by a :class:`RunProgress` in a quiet run; None in a verbose one."""
    if is_verbose(trainer.args):
        return None
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    progress = RunProgress()
    trainer.add_callback(progress)
    return progress


def log_metrics(trainer, split: str, metrics: dict[str, float]) -> None:
    """Trainer's ``***** <split> metrics *****`` dump, in a verbose run only: the summary shows the scores."""
    if is_verbose(trainer.args):
        trainer.log_metrics(split, metrics)


def say(training_args, lines: list[str]) -> None:
    """Print ``lines`` on the process that logs (one of several processes)."""
    if training_args.should_log:
        for line in lines:
            print(line, flush=True)


def describe_splits(splits: dict[str, Any]) -> str:
    """``train file data/train.csv: 400 rows; validation file data/validation.csv: 100 rows``, a file under the
    current folder named relative to it."""
    here = f"{Path.cwd()}{os.sep}"
    return "; ".join(
        f"{split.source.replace(here, '')}: {plural(len(split.dataset), 'row')}" for split in splits.values()
    )


def describe_labels(labels, token: bool = False) -> str:
    """``single label classification, 4 labels: a, b, c, d``; a token task's ``7 tags: O, B-DATE, ...``."""
    names = list(getattr(labels, "names", None) or [])
    if token:
        return f"{len(names)} tags: {short_list(names)}"
    problem = str(labels.problem_type).replace("_", " ")
    return f"{problem}, {len(names)} labels: {short_list(names)}" if names else problem


def describe_head(config) -> str:
    """``mean pooling, linear head`` for a pooled config; ``label_text pooling, shared scorer`` for a label-text one
    (whose scorer is its head: classifier_head is not read); nothing for anything else."""
    pooling = getattr(config, "pooling", None)
    head = getattr(config, "classifier_head", None)
    if pooling == "label_text":
        head_text = f"{config.label_text_scorer} scorer ({LABEL_TEXT_SCORER_WORDS[config.label_text_scorer]})"
    elif pooling == "label_tokens":
        head_text = f"{head} head on each label token"
    else:
        head_text = head and f"{head} head"
    return ", ".join(part for part in (pooling and f"{pooling} pooling", head_text) if part)


# What a label-text model's scorer computes (heads.LabelTextHead), as the model line says it.
LABEL_TEXT_SCORER_WORDS = {
    "shared": "the scaled cosine of the text and each label, any labels",
    "per_label": "the scaled cosine plus a linear term per label, the model's own labels",
}


def describe_tasks(tasks: dict[str, Any]) -> list[str]:
    """What was read: for one task each split's source and rows, then its labels; for several, a line per task."""
    if len(tasks) == 1:
        (task,) = tasks.values()
        return [
            f"Data: {describe_splits(task.splits)}",
            f"Labels: {describe_labels(task.labels, token=task.kind == 'token')}",
        ]
    return [
        f"Task {name} ({task.kind}): {describe_splits(task.splits)}; "
        + describe_labels(task.labels, token=task.kind == "token")
        for name, task in tasks.items()
    ]


def describe_model(model, base_model: str, parameters: int) -> str:
    """``PooledForSequenceClassification on <backbone> (bert): mean pooling, linear head; 22.7M parameters, all
    trained``, and for a multi-task model each task's head."""
    config = model.config
    backbone = getattr(config, "backbone_config", None)
    family = f" ({backbone.model_type})" if backbone is not None else ""
    name = type(model).__name__
    if isinstance(model, PooledForTokenClassification):
        built = "token head"
    elif hasattr(model, "task_configs"):
        parts = [
            f"{name}: " + (describe_head(task) if config.kind(name) != "token" else "token head")
            for name, task in model.task_configs.items()
        ]
        built = "; ".join(parts)
    else:
        built = describe_head(config)
    trained = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
    share = "all trained" if trained == parameters else f"{count(trained)} trained"
    built = f": {built}" if built else ""
    return f"Model: {name} on {base_model}{family}{built}; {count(parameters)} parameters, {share}"


def describe_length(length: int, origin: str) -> str:
    """``Text length: 128 tokens (from --max_seq_length); ...``: where every text is cut, in the run and by the saved
    model."""
    return (
        f"Text length: {length} tokens (from {origin}); longer texts are cut there in training, evaluation and "
        "predictions, and by the saved model (its max_seq_length)."
    )


def print_summary(
    output_dir: Path,
    metrics: dict[str, float],
    examples,
    kinds: dict[str, str],
    single: bool,
    zero_shot: bool = False,
    model_at: str | Path | None = None,
) -> None:
    """The end of a run: how training went, the scores, where the model is, the saved model's answers for the example
    texts (``[(text, {task: answers})]``) and how to use it. ``kinds``: task -> kind, in task order; ``single``: the
    model published is one task's (a classifier), not a multi-task model; ``zero_shot``: it scores any labels given
    as text (a label-text model with the shared scorer), so the zero-shot pipeline is shown too; ``model_at``: where
    the model is when ``output_dir`` holds no copy of it (a saved model only evaluated or predicted with)."""
    _print_evaluation(output_dir, metrics, width=28 if single else 32)  # task names make metric names longer
    if model_at is not None:
        print(f"The model was used where it is (no copy saved): {model_at}")
    model_at = Path(output_dir if model_at is None else model_at)
    if examples and single:
        print("The saved model, loaded with pipeline():")
        for text, answers in examples:
            print(f"  {text!r}: " + answer_text(next(iter(answers.values()))))
    elif examples:
        print("The saved model's answers:")
        for text, answers in examples:
            print(f"  {text!r}")
            for task, answer in answers.items():
                print(f"      {task}: {answer_text(answer)}")
    _print_usage(_usage(model_at, kinds, single) + (_zero_shot_usage(model_at) if zero_shot else []))


def answer_text(answers: list[dict[str, Any]]) -> str:
    """A task's answers in a line: ``billing 0.912``, ``PRODUCT 'X200 router', DATE 'Monday'``, ``3.142``,
    ``(none)``."""
    if not answers:
        return "(none)"
    if "entity_group" in answers[0]:
        return ", ".join(f"{answer['entity_group']} {answer['word']!r}" for answer in answers)
    if "label" in answers[0]:
        return ", ".join(f"{answer['label']} {answer['score']:.3f}" for answer in answers)
    return ", ".join(f"{answer['score']:.3f}" for answer in answers)


def _print_evaluation(output_dir: Path, metrics: dict[str, float], width: int) -> None:
    shown = shown_metrics(metrics)
    print()
    if "train_runtime" in metrics:
        print(
            f"Trained {epochs_text(metrics.get('epoch', 0))} on {plural(metrics.get('train_rows', 0), 'row')} in "
            f"{metrics['train_runtime']:.0f} s; final training loss {metrics.get('train_loss', float('nan')):.4g}"
        )
    if shown:
        print("Evaluation:")
        width = max(width, *(len(key) + 1 for key in shown))
        for key, value in sorted(shown.items()):
            print(
                f"  {key:<{width}} {value:.4f}" if isinstance(value, float) else f"  {key:<{width}} {value}"
            )
    print(f"Saved to: {output_dir}")


def _usage(output_dir: Path, kinds: dict[str, str], single: bool) -> list[str]:
    """How to use the saved model: ``pipeline()`` for one task's model, ``PooledForMultiTask`` for a multi-task one."""
    model = _model_literal(output_dir)
    if not single:
        first = next((name for name, kind in kinds.items() if kind == "token"), next(iter(kinds)))
        return [
            f"model = pooled_models.PooledForMultiTask.from_pretrained({model})  # model(**inputs)[task].logits",
            f'model.export_head("{first}", "{first}_only")  # one task as a model that pipeline() loads',
        ]
    if next(iter(kinds.values())) == "token":
        return [
            "from transformers import pipeline",
            f'ner = pipeline("token-classification", model={model}, aggregation_strategy="simple")',
            'print(ner("Your text here"))',
        ]
    return [
        "from transformers import pipeline",
        f'classify = pipeline("text-classification", model={model})',
        'print(classify("Your text here"))',
    ]


def _zero_shot_usage(output_dir: Path) -> list[str]:
    """How to ask a label-text model with the shared scorer about labels of the user's own choosing."""
    return [
        f'zero_shot = pipeline("zero-shot-classification", model={_model_literal(output_dir)})',
        'print(zero_shot("Your text here", candidate_labels=["any label", "another one"]))',
    ]


def _model_literal(output_dir: Path) -> str:
    """The saved model's folder as the user would type it: relative when under the current folder."""
    try:
        shown = output_dir.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = output_dir
    return json.dumps(str(shown), ensure_ascii=False)


def _print_usage(code: list[str]) -> None:
    """The last lines of a run's summary: how to use the saved model."""
    print("Use it:")
    for line in ["import pooled_models  # registers the pooled model types with transformers", *code]:
        print(f"  {line}")
