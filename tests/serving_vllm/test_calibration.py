"""vLLM's affine score calibration (``PoolerConfig.logit_mean`` / ``logit_sigma``, the server's ``--pooler-config``) on
pooled checkpoints, applied as vLLM's own classifier heads apply it (``ClassifierPoolerHead``,
``TokenClassifierPoolerHead``): ``(logits - mean) / sigma`` before the activation, and with ``use_activation=False``
too. A label-text classifier's ``classify`` is calibrated, its open label set (the zero-shot plugin, which answers as
the zero-shot pipeline) is not; a token classifier's ``token_classify`` is calibrated per token."""

from __future__ import annotations

import torch
from helpers import ENTITY_LABELS
from label_helpers import (
    UNSEEN,
    ZERO_SHOT_TEXTS,
    assert_same_answer,
    ensure_zero_shot_entry_point,
    own_label_text_ids,
    zero_shot_pipeline_answer,
)
from transformers import AutoTokenizer
from vllm_helpers import (
    LABELS,
    TEXTS,
    TOLERANCE,
    classify,
    offline_engine,
    save_checkpoint,
    transformers_logits,
)

from pooled_models import PooledForTokenClassification
from pooled_models.serving.zero_shot import PLUGIN_NAME

MEAN, SIGMA = 0.5, 2.0


def calibration():
    from vllm.config import PoolerConfig

    return PoolerConfig(logit_mean=MEAN, logit_sigma=SIGMA)


def test_classify_is_calibrated_and_the_open_label_set_is_not(minilm_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    ensure_zero_shot_entry_point(tmp_path / "entry_point")
    ids = own_label_text_ids(tokenizer, LABELS, None)
    folder = save_checkpoint(
        tmp_path / "model", tokenizer, "label_text", label_text_scorer="shared", label_text_ids=ids
    )
    calibrated = (transformers_logits(folder) - MEAN) / SIGMA
    zero_shot = zero_shot_pipeline_answer(folder, ZERO_SHOT_TEXTS, UNSEEN, False)
    with offline_engine(folder, io_processor_plugin=PLUGIN_NAME, pooler_config=calibration()) as llm:
        torch.testing.assert_close(classify(llm, use_activation=False), calibrated, atol=TOLERANCE, rtol=0)
        torch.testing.assert_close(classify(llm), calibrated.softmax(-1), atol=TOLERANCE, rtol=0)
        (output,) = llm.encode(
            {"data": {"texts": ZERO_SHOT_TEXTS, "candidate_labels": UNSEEN}},
            pooling_task="plugin",
            use_tqdm=False,
        )
    assert_same_answer(output.outputs, zero_shot, TOLERANCE)


def test_token_classify_is_calibrated_per_token(minilm_path, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    folder = save_checkpoint(
        tmp_path, tokenizer, "mean", "bert", PooledForTokenClassification, id2label=ENTITY_LABELS
    )
    model = PooledForTokenClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = [
            (model(**tokenizer(text, return_tensors="pt")).logits[0] - MEAN) / SIGMA for text in TEXTS
        ]
    with offline_engine(folder, pooler_config=calibration()) as llm:
        outputs = llm.encode(TEXTS, pooling_task="token_classify", use_tqdm=False)
    for output, rows in zip(outputs, expected, strict=True):
        torch.testing.assert_close(output.outputs.data.float(), rows.softmax(-1), atol=TOLERANCE, rtol=0)
