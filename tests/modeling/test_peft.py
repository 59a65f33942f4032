"""LoRA with PEFT's standard sequence-classification config trains and saves the pooler with the head, for every
pooling: PEFT keeps the modules named "classifier" trainable and saves them next to the adapter, and a pooled
classifier's pooler and head are its "classifier"."""

import pytest
import torch
from helpers import random_batch, tiny_model

from pooled_models import POOLERS

FAST = ("attention", "label_tokens", "label_text", "lstm", "weighted_layer")
SETTINGS = {
    "label_tokens": {"label_token_init": "random"},
    # Label texts read in the top layer, scored per label: the marker, the head's weights and the layers' own LoRA.
    "label_text": {
        "label_text_ids": [[1, 10, 2], [1, 11, 12, 2], [1, 13, 2]],
        "label_text_layers": 1,
        "label_text_scorer": "per_label",
    },
}


def model_for(pooling: str):
    return tiny_model(pooling, **SETTINGS.get(pooling, {}))


@pytest.mark.parametrize(
    "pooling",
    [pytest.param(name, marks=() if name in FAST else pytest.mark.slow) for name in sorted(POOLERS)],
)
def test_lora_trains_and_saves_the_pooler_and_an_adapter_reproduces_the_logits(pooling, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(
        model_for(pooling), LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"], r=4)
    )
    pooler_parameters = dict(model_for(pooling).classifier.pooler.named_parameters())
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    # Every pooler parameter is trainable, once (PEFT's trainable copy of the classifier, not a second copy).
    for name in pooler_parameters:
        assert sum(key.endswith(f".pooler.{name}") for key in trainable) == 1, name

    batch, labels = random_batch([5, 8]), torch.tensor([0, 2])
    before = {
        name: parameter.detach().clone() for name, parameter in model.named_parameters() if ".pooler." in name
    }
    optimizer = torch.optim.AdamW(
        [parameter for parameter in model.parameters() if parameter.requires_grad], lr=1e-2
    )
    model.train()
    for _ in range(3):
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    changed = [
        name
        for name, parameter in model.named_parameters()
        if name in before and name in trainable and not torch.equal(parameter, before[name])
    ]
    assert len(changed) == len(pooler_parameters), (changed, list(pooler_parameters))

    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    torch.manual_seed(0)
    reloaded = PeftModel.from_pretrained(model_for(pooling), tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, logits)
        merged = reloaded.merge_and_unload()
        torch.testing.assert_close(merged(**batch).logits, logits, atol=1e-6, rtol=1e-6)
    merged.save_pretrained(tmp_path / "merged")  # a plain pooled checkpoint again
    assert (tmp_path / "merged" / "model.safetensors").exists()
