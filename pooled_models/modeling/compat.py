"""What newer transformers releases added, detected rather than imported unconditionally.

The package declares a range of transformers versions (setup.cfg), and a serving engine pins its own (vLLM 0.32:
``>=5.16.1,<5.20``), so the model room must import and behave the same on every version of the range. Each name
here is the newest form where the installed transformers has it, and the older form otherwise; ``make test-oldest``
runs the model room's tests on the lowest declared version, ``make test`` on the newest.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from transformers import AutoConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

try:  # transformers >= 5.20: a composite config declares each sub-config's class and default type in one spec
    from transformers.configuration_utils import SubConfigSpec
except ImportError:  # older: `sub_configs` names the classes, and the config builds its own defaults
    SubConfigSpec = None

try:  # transformers >= 5.23: output_hidden_states also takes an index or a list of them, and keeps only those states
    from transformers.utils.output_capturing import selected_hidden_states as _selected_hidden_states  # noqa: F401

    SELECTS_HIDDEN_STATES = True
except ImportError:  # older: a flag, every hidden state or none (a list would be read as True, or fail)
    SELECTS_HIDDEN_STATES = False

__all__ = [
    "SELECTS_HIDDEN_STATES",
    "SubConfigSpec",
    "backbone_sub_config_defaults",
    "BACKBONE_SUB_CONFIGS",
    "default_backbone_config",
]

# The backbone a pooled config gets when none is given (as the config's docstring says: BERT-base).
DEFAULT_BACKBONE_TYPE = "bert"
# `sub_configs` of a config with a backbone: on transformers >= 5.20 the same value its classproperty derives from
# `sub_configs_defaults`; on older versions the class attribute transformers reads (to_dict, attention settings).
BACKBONE_SUB_CONFIGS = {"backbone_config": AutoConfig}


def backbone_sub_config_defaults() -> dict:
    """``sub_configs_defaults`` of a config with a backbone: the spec that builds a missing backbone config on
    transformers >= 5.20; empty before, where :func:`default_backbone_config` builds it."""
    if SubConfigSpec is None:
        return {}
    return {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type=DEFAULT_BACKBONE_TYPE)}


def default_backbone_config():
    """The backbone config to use when none is given: None where transformers' ``SubConfigSpec`` builds it (the
    newest versions), else the default type's config, built here as the spec would."""
    return None if SubConfigSpec is not None else CONFIG_MAPPING[DEFAULT_BACKBONE_TYPE]()
