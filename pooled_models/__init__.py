"""pooled_models: any pooling head on any Transformers backbone, as a first-class Transformers model.

Importing the package registers ``PooledConfig`` (model_type ``"pooled"``) and the ``Pooled*`` models
with ``AutoConfig``, ``AutoModel`` and ``AutoModelForSequenceClassification``, so pooled checkpoints load
with the Auto classes and ``pipeline(...)`` without ``trust_remote_code``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from .modeling.configuration_pooled import PooledConfig
from .modeling.modeling_pooled import PooledForSequenceClassification, PooledModel, PooledPreTrainedModel
from .modeling.pooling import POOLERS, LayerPooler, Pooler, TokenPooler, get_pooler_class, register_pooler

__version__ = "0.1.0"

__all__ = [
    "PooledConfig",
    "PooledPreTrainedModel",
    "PooledModel",
    "PooledForSequenceClassification",
    "POOLERS",
    "Pooler",
    "TokenPooler",
    "LayerPooler",
    "register_pooler",
    "get_pooler_class",
]

AutoConfig.register(PooledConfig.model_type, PooledConfig, exist_ok=True)
AutoModel.register(PooledConfig, PooledModel, exist_ok=True)
AutoModelForSequenceClassification.register(PooledConfig, PooledForSequenceClassification, exist_ok=True)
