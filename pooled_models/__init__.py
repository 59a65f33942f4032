"""pooled_models: any pooling head on any Transformers backbone, as a first-class Transformers model.

Importing the package registers ``PooledConfig`` (model_type ``"pooled"``) and the ``Pooled*`` models
with ``AutoConfig``, ``AutoModel``, ``AutoModelForSequenceClassification`` and ``AutoModelForTokenClassification``,
and ``PooledMultiTaskConfig`` (model_type ``"pooled_multitask"``) with ``AutoConfig`` and ``AutoModel``, so pooled
checkpoints load with the Auto classes and ``pipeline(...)`` without ``trust_remote_code``; and it registers
``attn_implementation="torch_varlen"`` (torch's own padding-free attention kernel) with transformers'
``AttentionInterface``, and the pipelines of ``"text-classification"`` (texts cut at a pooled model's length) and
``"zero-shot-classification"`` (label-text classifiers). It imports the model room
only (and ``export_onnx``, which imports onnx when called): the CLI (``pooled_models.train``) and the sweep (``pooled_models.sweep``) need their extras and are imported on use.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .export import export_onnx
from .modeling.configuration_multitask import PooledMultiTaskConfig
from .modeling.configuration_pooled import PooledConfig
from .modeling.documents import DocumentCollator, document_windows_from, tokenize_documents
from .modeling.heads import Head, register_head
from .modeling.label_tokens import LabelTokenInit
from .modeling.layer_pooling import LayerPooler
from .modeling.losses import MultiLabelLoss, register_multi_label_loss
from .modeling.modeling_multitask import MultiTaskOutput, PooledForMultiTask
from .modeling.modeling_pooled import PooledForSequenceClassification, PooledModel, PooledPreTrainedModel
from .modeling.modeling_token import PooledForTokenClassification
from .modeling.pooling import POOLERS, Pooler, TokenPooler, get_pooler_class, register_pooler
from .modeling.registry import HEADS, LABEL_TOKEN_INITS, MULTI_LABEL_LOSSES, POOLINGS
from .modeling.text_classification_pipeline import register_text_classification_pipeline
from .modeling.varlen_attention import TORCH_VARLEN, register_varlen_attention
from .modeling.window_pooling import WINDOW_POOLINGS, document_gate_parameters
from .modeling.zero_shot_pipeline import register_zero_shot_pipeline

__version__ = "0.8.0"

__all__ = [
    "PooledConfig",
    "PooledPreTrainedModel",
    "PooledModel",
    "PooledForSequenceClassification",
    "PooledForTokenClassification",
    "PooledMultiTaskConfig",
    "PooledForMultiTask",
    "MultiTaskOutput",
    "POOLINGS",
    "POOLERS",
    "HEADS",
    "MULTI_LABEL_LOSSES",
    "LABEL_TOKEN_INITS",
    "Pooler",
    "TokenPooler",
    "LayerPooler",
    "Head",
    "MultiLabelLoss",
    "LabelTokenInit",
    "register_pooler",
    "register_head",
    "register_multi_label_loss",
    "get_pooler_class",
    "export_onnx",
    "TORCH_VARLEN",
    "WINDOW_POOLINGS",
    "DocumentCollator",
    "tokenize_documents",
    "document_windows_from",
    "document_gate_parameters",
]

AutoConfig.register(PooledConfig.model_type, PooledConfig, exist_ok=True)
AutoModel.register(PooledConfig, PooledModel, exist_ok=True)
AutoModelForSequenceClassification.register(PooledConfig, PooledForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(PooledConfig, PooledForTokenClassification, exist_ok=True)
AutoConfig.register(PooledMultiTaskConfig.model_type, PooledMultiTaskConfig, exist_ok=True)
AutoModel.register(PooledMultiTaskConfig, PooledForMultiTask, exist_ok=True)
# attn_implementation="torch_varlen": torch's own padding-free attention kernel (modeling/varlen_attention.py)
register_varlen_attention()
# pipeline("text-classification") cutting pooled models' texts at their length, and pipeline("zero-shot-classification")
# for label-text classifiers: transformers' own for every other model. A checkpoint's own code finds them through
# config.json's custom_pipelines (modeling/pipeline_reference.py).
register_text_classification_pipeline()
register_zero_shot_pipeline()
