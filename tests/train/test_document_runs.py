"""train.py in document mode on the tiny backbone (docs/long-documents.md, "Training"): the saved model is a document
model, the log and the card name its windows, its predictions read every window of a test document, a capped run keeps
its cap, the window budget bounds the training batches, --document_mode auto is refused (never measured), and
every bad setting is refused by name before anything is written."""

import json
import random

import pytest
import torch
from helpers import WORDS, entity_rows, leftovers, topic_rows, train, write_rows
from transformers import AutoTokenizer, TrainerCallback

from pooled_models import PooledForSequenceClassification
from pooled_models.errors import DataError, UsageError
from pooled_models.modeling.documents import DocumentCollator, tokenize_documents
from pooled_models.train.data import documents as train_documents

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]  # whole train.py runs

WINDOW = ["--document_window", "16", "--document_stride", "4", "--pooling", "mean"]


def long_rows(count: int, seed: int = 0) -> list[dict]:
    """Topic rows, every other one behind a long run of filler (up to about ten 16-token windows): the words that
    decide the label sit past the first window."""
    rng = random.Random(seed)
    rows = topic_rows(count, seed)
    for index, row in enumerate(rows):
        if index % 2:
            row["text"] = " ".join(
                rng.choice(["the", "today", "was", "we"]) for _ in range(rng.randint(20, 110))
            )
            row["text"] += " " + " ".join(WORDS[row["label"]][:3])
    return rows


def data_flags(tmp_path, rows, test_rows=None) -> list[str]:
    train_file = write_rows(tmp_path / "train.jsonl", rows)
    test_file = write_rows(tmp_path / "test.jsonl", test_rows or rows[:6])
    return ["--train_file", str(train_file), "--test_file", str(test_file), "--do_train", "--do_predict"]


def model_scores(folder, texts: list[str], max_windows=None) -> torch.Tensor:
    """The saved model's own probabilities over each text's windows (its first ``max_windows``; None: all)."""
    model = PooledForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = model.config
    windows = tokenize_documents(
        tokenizer, texts, config.document_window, config.document_stride, max_windows
    )
    batch = DocumentCollator(tokenizer)([{"input_ids": ids} for ids in windows["input_ids"]])
    with torch.no_grad():
        return model(**batch).logits.softmax(-1)


def test_a_document_run_saves_a_document_model_that_reads_every_window(
    tiny_backbone_path, tmp_path, capsys, monkeypatch
):
    rows = long_rows(24)
    seen: dict[str, list[tuple[int, int]]] = {
        "train": [],
        "predict": [],
    }  # (documents, windows) of each batch
    phase = ["train"]
    original = DocumentCollator.__call__

    def spy(self, features):
        batch = original(self, features)
        seen[phase[0]].append((batch["document_windows"].shape[0], batch["input_ids"].shape[0]))
        return batch

    class Predicting(TrainerCallback):
        def on_train_end(self, *args, **kwargs):
            phase[0] = "predict"

    monkeypatch.setattr(DocumentCollator, "__call__", spy)
    flags = [
        *data_flags(tmp_path, rows),
        *WINDOW,
        "--max_windows_per_document",
        "3",
        "--max_windows_per_batch",
        "6",
        "--document_pooling",  # every window weighs from the start: the control below sees the windows past 3
        "mean",
    ]
    flags += ["--per_device_eval_batch_size", "4"]
    result = train(tiny_backbone_path, tmp_path / "out", *flags, callbacks=[Predicting()])
    folder = result.output_dir
    log = capsys.readouterr().out
    assert "Document mode on (--document_window 16): windows of 16 tokens, 4 shared" in log
    assert "training documents of 1 to 3 windows" in log and "batches of at most 6 windows" in log
    config = json.loads((folder / "config.json").read_text())
    assert (config["document_window"], config["document_stride"], config["document_pooling"]) == (
        16,
        4,
        "mean",
    )
    card = (folder / "README.md").read_text()
    assert "| document mode | on (--document_window 16) |" in card and "| `document_window` | `16` |" in card
    assert "| windows per training document | at most 3 (start_end) |" in card
    # The window budget bounds every training batch, documents capped at 3 windows; prediction batches hold up to
    # per_device_eval_batch_size windows, a longer document alone (every window read).
    assert seen["train"] and max(windows for _, windows in seen["train"]) <= 6
    assert (
        sum(documents for documents, _ in seen["train"]) == 24 * 3
    )  # every document once an epoch (3 epochs)
    assert all(windows <= 4 or documents == 1 for documents, windows in seen["predict"])
    assert max(windows for _, windows in seen["predict"]) > 3  # a test document read past the training cap

    # The predictions read every window: the saved model's scores over all windows, not over the first three.
    test_texts = [row["text"] for row in rows[:6]]
    predicted = [
        json.loads(line)["scores"] for line in (folder / "predictions.jsonl").read_text().splitlines()
    ]
    labels = [config["id2label"][str(index)] for index in range(3)]
    predicted = torch.tensor([[row[label] for label in labels] for row in predicted])
    torch.testing.assert_close(predicted, model_scores(folder, test_texts), atol=1e-5, rtol=0)
    assert (model_scores(folder, test_texts, max_windows=3) - predicted).abs().max() > 1e-4  # control


@pytest.mark.parametrize("given, rate", [(None, 0.1), ("0.02", 0.02)])
def test_first_plus_rest_trains_its_gate_at_ten_times_the_heads_rate_unless_told(
    tiny_backbone_path, tmp_path, given, rate
):
    """The gate starts at zero and Adam moves it by about its rate a step: at the head's rate it barely opens
    (arguments/documents.py, DOCUMENT_GATE_RATE_FACTOR). The rate the optimizer gives it, the card, and the gate
    trained off zero."""
    rates: dict[str, float] = {}

    class Rates(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
            gate = model.classifier.document_pooler.across.gate
            head = model.classifier.head.out_proj.weight
            for group in optimizer.param_groups:
                for name, parameter in (("gate", gate), ("head", head)):
                    if any(parameter is member for member in group["params"]):
                        rates[name] = group.get("initial_lr", group["lr"])

    flags = [
        *data_flags(tmp_path, long_rows(12)),
        *WINDOW,
        "--num_train_epochs",
        "1",
        "--per_device_train_batch_size",
        "4",
    ]
    flags += ["--head_learning_rate", "0.01"] + (["--document_gate_learning_rate", given] if given else [])
    folder = train(tiny_backbone_path, tmp_path / "out", *flags, callbacks=[Rates()]).output_dir
    assert rates == {"gate": pytest.approx(rate), "head": pytest.approx(0.01)}
    assert f"| learning rate (cross-window gate) | {rate:g} |" in (folder / "README.md").read_text()
    model = PooledForSequenceClassification.from_pretrained(folder)
    assert model.config.document_pooling == "first_plus_rest"
    assert model.classifier.document_pooler.across.gate.abs().max() > 0


def test_document_mode_true_reads_windows_of_the_runs_length(tiny_backbone_path, tmp_path, capsys):
    flags = [*data_flags(tmp_path, long_rows(24)), "--max_seq_length", "16", "--pooling", "mean"]
    # asked for (train.py's default is off), and with gradient checkpointing: the windows' passes are recomputed
    flags += ["--document_mode", "true", "--gradient_checkpointing", "true", "--num_train_epochs", "1"]
    folder = train(tiny_backbone_path, tmp_path / "out", *flags).output_dir
    assert "Document mode on (--document_mode true): windows of 16 tokens" in capsys.readouterr().out
    assert json.loads((folder / "config.json").read_text())["document_window"] == 16
    assert "| document mode | on (--document_mode true) |" in (folder / "README.md").read_text()


@pytest.mark.parametrize("argv", [["--document_mode", "auto"], ["--document_mode=auto"]])
def test_document_mode_auto_is_refused_naming_the_valid_choices(argv, tmp_path):
    """auto (on from 10% of long training texts) was removed: its threshold was never measured (issue 54)."""
    from types import SimpleNamespace

    from pooled_models.train.arguments import parse_arguments
    from pooled_models.train.arguments.documents import check_document_arguments

    removed = r"document_mode 'auto', which was removed after pooled_models 0.7.1: .*never measured.*Valid choices: true .*, false"
    with pytest.raises(UsageError, match=rf"The command line sets {removed}"):
        parse_arguments(["--output_dir", "out", *argv])
    config = tmp_path / "run.yaml"
    config.write_text("output_dir: out\ndocument_mode: auto\n")
    with pytest.raises(UsageError, match=rf"Config file {config} sets {removed}"):
        parse_arguments([str(config)])
    with pytest.raises(UsageError, match=removed):  # arguments built in Python
        check_document_arguments(SimpleNamespace(document_mode="auto"))


def test_the_default_cuts_every_text(tiny_backbone_path):
    from types import SimpleNamespace

    args = SimpleNamespace(document_mode=None, seed=0)
    tasks = {"": SimpleNamespace(kind="sequence", spec=SimpleNamespace(data=SimpleNamespace(text_pair_column=None, text_column="text")),
                                 splits={"train": SimpleNamespace(dataset={"text": ["long " * 30] * 20})})}  # fmt: skip
    off = train_documents.choose_document_mode(args, {}, None, tasks, lambda: 16)
    assert not off.on and off.reason == "off (train.py's default; --document_mode true reads them)"
    args.document_mode = "true"
    assert train_documents.choose_document_mode(args, {}, None, tasks, lambda: 16).on  # control


@pytest.mark.parametrize(
    "flags, named",
    [
        (
            ["--document_window", "100"],
            "document_window=100 is more tokens than the backbone has positions for",
        ),
        (["--document_window", "16", "--document_stride", "16"], "document_stride=16"),
        (
            ["--document_mode", "false", "--max_windows_per_batch", "8"],
            "--max_windows_per_batch is a setting of document mode",
        ),
        (
            ["--document_mode", "false", "--document_window", "16"],
            "--document_window is a setting of document mode",
        ),
        (["--document_mode", "maybe"], "maybe"),
        (
            ["--document_mode", "false", "--document_gate_learning_rate", "0.1"],
            "--document_gate_learning_rate is a setting of document mode",
        ),
        (
            ["--document_window", "16", "--document_pooling", "max", "--document_gate_learning_rate", "0.1"],
            "this model's document_pooling is 'max': leave it out, or choose first_plus_rest",
        ),
        (["--document_window", "16", "--document_gate_learning_rate", "0"], "must be a number > 0"),
        (["--document_window", "16", "--max_tokens_per_batch", "64"], "use --max_windows_per_batch instead"),
    ],
)
def test_bad_document_settings_are_refused_before_anything_is_written(
    tiny_backbone_path, tmp_path, flags, named
):
    output_dir = tmp_path / "out"
    with pytest.raises((UsageError, SystemExit)) as error:
        train(tiny_backbone_path, output_dir, *data_flags(tmp_path, topic_rows(6)), *flags)
    if error.type is UsageError:
        assert named in str(error.value)
    assert leftovers(output_dir) == []


def test_a_token_head_and_an_empty_document_are_refused_by_name(tiny_backbone_path, tmp_path):
    token_file = write_rows(tmp_path / "tokens.jsonl", entity_rows(6))
    with pytest.raises(
        UsageError, match="document_mode is set, but it takes effect only with a run of one sequence"
    ):
        train(tiny_backbone_path, tmp_path / "out", "--train_file", str(token_file), "--do_train",
              "--words_column", "words", "--tags_column", "tags", "--document_mode", "true")  # fmt: skip
    rows = [*topic_rows(5), {"text": "[SEP] [CLS]", "label": "food"}]
    with pytest.raises(
        DataError, match=r"row 5: the text has no token besides the tokenizer's special tokens"
    ):
        train(tiny_backbone_path, tmp_path / "out", *data_flags(tmp_path, rows), *WINDOW)
    assert leftovers(tmp_path / "out") == []
