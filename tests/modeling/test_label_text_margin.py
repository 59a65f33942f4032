"""Label text's seen-label margin (label_text_seen_margin, label_text_margin.py): taken off the logit of every trained
label wherever it is asked, matched by its words (call-time labels in any order among new ones, the model's own labels),
nothing else changed; it follows config edits and from_pretrained overrides, survives save/reload and a load with
trust_remote_code without the package, runs under torch.compile, and bad values are refused by name."""

import json

import pytest
import torch
from helpers import run_without_package
from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import AutoTokenizer, pipeline

from pooled_models import PooledConfig, PooledForSequenceClassification
from pooled_models.modeling.label_text import label_text_token_ids, pad_label_ids

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OWN = {0: "sport", 1: "food", 2: "music"}
ASKED = ["weather", "music", "sport", "travel sports"]  # two trained labels among new ones (and a near miss)
SEEN_ASKED = torch.tensor([False, True, True, False])
TEXTS = ["the match ended two to one", "a pizza with extra cheese", "x"]


@pytest.fixture(scope="module")
def folder(tiny_backbone_path, tmp_path_factory):
    torch.manual_seed(0)
    # saved without a margin: the "plain" model the tests below compare with (the default is tested by its own)
    model = PooledForSequenceClassification.from_backbone(
        tiny_backbone_path,
        pooling="label_text",
        label_text_scorer="shared",
        id2label=OWN,
        label_text_seen_margin=0.0,
    )
    path = tmp_path_factory.mktemp("margin")
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_backbone_path).save_pretrained(path)
    return path


def logits(model, tokenizer, labels=None):
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    extra = {}
    if labels is not None:
        extra["label_input_ids"], extra["label_attention_mask"] = pad_label_ids(
            label_text_token_ids(labels, tokenizer)
        )
    with torch.no_grad():
        return model(**batch, **extra).logits


def test_the_margin_is_taken_off_the_trained_labels_only_wherever_asked(folder):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    plain = PooledForSequenceClassification.from_pretrained(folder).eval()
    model = PooledForSequenceClassification.from_pretrained(folder, label_text_seen_margin=1.5).eval()
    expected = logits(plain, tokenizer, ASKED) - 1.5 * SEEN_ASKED.float()
    torch.testing.assert_close(logits(model, tokenizer, ASKED), expected)
    # the model's own labels: every one is trained, so the softmax (text-classification) is unchanged
    own = logits(model, tokenizer)
    torch.testing.assert_close(own, logits(plain, tokenizer) - 1.5)
    torch.testing.assert_close(own.softmax(-1), logits(plain, tokenizer).softmax(-1))
    # label_text_seen_ids names which labels are trained: here only "music"
    music = label_text_token_ids(["music"], tokenizer)
    model.config.label_text_seen_ids = music  # an edit a built model follows
    expected = logits(plain, tokenizer, ASKED) - 1.5 * torch.tensor([False, True, False, False]).float()
    torch.testing.assert_close(logits(model, tokenizer, ASKED), expected)
    # the control: no margin, no change
    model.config.label_text_seen_margin = 0.0
    torch.testing.assert_close(logits(model, tokenizer, ASKED), logits(plain, tokenizer, ASKED))


def test_the_margin_survives_saving_and_the_zero_shot_pipeline_applies_it(folder, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = PooledForSequenceClassification.from_pretrained(folder, label_text_seen_margin=2.0).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["label_text_seen_margin"] == 2.0
    reloaded = PooledForSequenceClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(logits(reloaded, tokenizer, ASKED), logits(model, tokenizer, ASKED))
    answer = pipeline("zero-shot-classification", model=str(tmp_path))(TEXTS[0], candidate_labels=ASKED)
    expected = logits(model, tokenizer, ASKED)[0].softmax(-1)
    got = dict(zip(answer["labels"], answer["scores"], strict=True))
    assert [got[label] for label in ASKED] == pytest.approx(expected.tolist(), abs=1e-5)
    compiled = torch.compile(reloaded, fullgraph=True, backend="eager")
    torch.testing.assert_close(logits(compiled, tokenizer, ASKED), logits(model, tokenizer, ASKED))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"label_text_seen_margin": float("nan")}, "label_text_seen_margin must be a finite number"),
        ({"label_text_seen_margin": True}, "label_text_seen_margin"),
        ({"label_text_seen_ids": [[101]]}, "label_text_seen_ids must list the trained labels' texts"),
        ({"pooling": "mean", "label_text_seen_margin": 1.0}, "label_text_seen_margin"),
    ],
)
def test_bad_margins_are_refused_by_name(settings, message):
    settings = {"pooling": "label_text", "num_labels": 2, **settings}
    # the typed field refuses a value of another type, the pooler's check the rest; each names the setting
    with pytest.raises((ValueError, StrictDataclassFieldValidationError), match=message):
        PooledConfig(**settings)


@pytest.mark.slow  # a fresh interpreter without the package
def test_a_checkpoints_own_code_applies_the_margin(folder, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = PooledForSequenceClassification.from_pretrained(folder, label_text_seen_margin=2.0).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ids, mask = pad_label_ids(label_text_token_ids(ASKED, tokenizer))
    script = f"""
        import json, torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        model = AutoModelForSequenceClassification.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
        batch = tokenizer({TEXTS!r}, padding=True, return_tensors="pt")
        ids, mask = torch.tensor({ids.tolist()!r}), torch.tensor({mask.tolist()!r})
        with torch.no_grad():
            out = model(**batch, label_input_ids=ids, label_attention_mask=mask).logits
        print(json.dumps({{"module": type(model).__module__, "logits": out.tolist()}}))
    """
    completed = run_without_package(script, tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("transformers_modules.")
    torch.testing.assert_close(torch.tensor(report["logits"]), logits(model, tokenizer, ASKED))
