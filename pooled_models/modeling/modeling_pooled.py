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

What every pooled model mixes in: how it holds and runs its backbone (``backbone_runner.py``), and how it is built
from disk and saved (``checkpoint_loading.py``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers and its sibling model files.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling, SequenceClassifierOutput
from transformers.utils.generic import can_return_tuple

from .backbone import input_embeddings_of
from .backbone_runner import FLAT_BATCH, BackboneCall, BackboneRunner
from .checkpoint_loading import CheckpointLoading, read_tokenizer_settings
from .configuration_pooled import PooledConfig
from .document_settings import check_window_fits
from .encoding import SentenceEncoderMixin
from .engines import refuse_engine_backend
from .heads import HEADS, LabelTextHead, LabelTokenHead, multi_sample_logits
from .inputs import check_inputs
from .label_text import LabelMarker
from .label_tokens import LabelEmbeddings
from .losses import classification_loss
from .padding_free import flat_batch_from
from .pooling import Pooler, build_pooler, hidden_states_for_caller
from .problem_types import infer_problem_type
from .targets import as_label_tensor, check_labels
from .text_config import text_config_of
from .text_length import text_length
from .window_pooling import WindowPooler, build_document_pooler, warn_rows_may_be_cut

# The settings that choose a model's modules; the others are settings of the chosen ones.
CHOSEN = ("pooling", "classifier_head", "num_labels")
# Modules that initialise their own plain parameters with init_parameters(config, input_embeddings).
INITIALISED_BY_THEMSELVES = (
    Pooler,
    LabelEmbeddings,
    LabelMarker,
    LabelTokenHead,
    LabelTextHead,
    WindowPooler,
)
# Keywords of a forward that carry labels given as text at call time (the open label set of pooling="label_text").
LABEL_TEXT_INPUTS = ("label_input_ids", "label_attention_mask")
# The inputs _model_inputs names itself (the rest of a forward's keywords pass through).
_FORWARD_INPUTS = ("input_ids", "inputs_embeds", "attention_mask", "token_type_ids", "position_ids")

__all__ = ["PooledPreTrainedModel", "PooledModel", "PooledForSequenceClassification", "AUTO_MAP"]

# Written into every saved config.json, so each Auto class can load each checkpoint with
# trust_remote_code=True where pooled_models is not installed, whichever Pooled class saved it.
AUTO_MAP = {
    "AutoConfig": "configuration_pooled.PooledConfig",
    "AutoModel": "modeling_pooled.PooledModel",
    "AutoModelForSequenceClassification": "modeling_pooled.PooledForSequenceClassification",
}


class PooledPreTrainedModel(CheckpointLoading, BackboneRunner, PreTrainedModel):
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
    # Whether the model takes padding-free batches (padding_free.py): those whose outputs are one row per text.
    takes_flat_batches: ClassVar[bool] = False

    def __init__(self, config: PooledConfig, *inputs, **kwargs):
        refuse_engine_backend(config)  # vLLM without the plugin: refused, never served with another pooling
        config.ensure_valid()  # a config edited by attribute is validated before modules are built from it
        if isinstance(config, PooledConfig):
            read_tokenizer_settings(config)
        super().__init__(config, *inputs, **kwargs)

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

    def max_text_length(self, tokenizer=None) -> int | None:
        """The most tokens of one text this model reads, where every path cuts a longer one (``text_length.py``): the
        config's ``max_seq_length``, else ``tokenizer``'s ``model_max_length``; capped at the backbone's positions
        (less the label tokens of ``pooling="label_tokens"``). None where nothing limits it."""
        position_limit = None if self.position_budget is None else self.position_budget - self.added_tokens
        tokenizer_limit = getattr(tokenizer, "model_max_length", None)
        return text_length(getattr(self.config, "max_seq_length", None), tokenizer_limit, position_limit)

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
        learned vectors; the token ids they started from are dropped if the new vocabulary no longer holds them. Label
        texts are read at every call, so a resize that would drop one of their tokens is refused, before anything is
        resized."""
        texts = getattr(self.config, "label_text_ids", None) or []
        highest_text = max((token for label in texts for token in label), default=-1)
        if new_num_tokens is not None and highest_text >= new_num_tokens:
            raise ValueError(
                f"resize_token_embeddings({new_num_tokens}) would drop token id {highest_text}, which the labels' "
                f"texts hold (label_text_ids); keep at least {highest_text + 1} tokens."
            )
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
        """The checked inputs of one forward pass, with a mask of ones when none is given. A padding-free batch
        (``cu_seq_lens_q``, ``padding_free.py``) comes back padded, with its :class:`FlatBatch` under
        ``FLAT_BATCH`` for :meth:`_backbone_call`."""
        flat = None
        if kwargs.get("cu_seq_lens_q") is not None:
            if not self.takes_flat_batches:
                raise ValueError(
                    f"{type(self).__name__} takes padded batches only: padding-free ones (cu_seq_lens_q) are read "
                    "by PooledModel and PooledForSequenceClassification. Pad the batch (DataCollatorWithPadding)."
                )
            given = {"input_ids": input_ids, "inputs_embeds": inputs_embeds, "token_type_ids": token_type_ids}
            given.update(position_ids=position_ids, attention_mask=attention_mask, **kwargs)
            flat, padded = flat_batch_from(given, self.pad_token_id)
            input_ids, inputs_embeds = padded["input_ids"], padded["inputs_embeds"]
            token_type_ids, position_ids = padded["token_type_ids"], padded["position_ids"]
            attention_mask = padded["attention_mask"]
            kwargs = {name: value for name, value in padded.items() if name not in _FORWARD_INPUTS}
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
        given = [name for name in LABEL_TEXT_INPUTS if kwargs.get(name) is not None]
        if given and not getattr(self.pooler, "reads_label_texts", False):
            raise ValueError(
                f"{', '.join(given)}: labels given as text at call time are read by pooling='label_text' only; this "
                f"model's pooling is {self.config.pooling!r}."
            )
        inputs = {
            "input_ids": input_ids,
            "inputs_embeds": inputs_embeds,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "position_ids": position_ids,
            **kwargs,
        }
        if flat is not None:
            inputs[FLAT_BATCH] = flat
        return inputs

    def _document_inputs(
        self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, attentions, kwargs
    ):
        """The checked inputs of a forward pass that may read documents (``_model_inputs``), and document mode's
        ``document_windows`` taken out of ``kwargs`` (None: each row is a text of its own). Warns once where a model in
        document mode gets rows as long as a window without it (window_pooling.warn_rows_may_be_cut)."""
        document_windows = kwargs.pop("document_windows", None)
        warn_rows_may_be_cut(self, input_ids if input_ids is not None else inputs_embeds, document_windows)
        inputs = self._model_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, attentions, kwargs
        )
        return inputs, document_windows

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
        tokens and label text): what ``PooledModel`` returns as ``pooler_output``, also from a classifier (before its
        head)."""
        inputs, document_windows = self._document_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, None, kwargs
        )
        pooled = self.pooler.encode(self._backbone_call(inputs), inputs, False)[1]
        return self.pooler.public_output(self.document_pooler(pooled, document_windows))


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
        r"^classifier\.document_pooler\.": "document_pooler.",
        r"^pooled\.backbone\.": "backbone.",
        r"^pooled\.pooler\.": "pooler.",
        **_POOLER_KEYS_0_1,
    }
    _keys_to_ignore_on_load_unexpected = [r"^classifier\."]
    # from_backbone refuses a sentence-transformers folder whose embeddings encode() would not reproduce (a classifier,
    # trained for its head, only warns).
    refuses_unreproducible_folders = True
    takes_flat_batches = True

    def __init__(self, config: PooledConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self._set_backbone(config, backbone)
        self.pooler = build_pooler(config)
        self.pooler.check_backbone(self.backbone, self.position_budget)
        self.pooler.connect(self)
        # Document mode (window_pooling.py): the windows' vectors pooled into one per document.
        self.document_pooler = build_document_pooler(config, self.pooler.output_dim)
        check_window_fits(config, self.position_budget, self.pooler.added_tokens)
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
        are those of the sequences with the label tokens inserted (one row per text and label group). In document
        mode the rows are windows, `document_windows` `[documents, max_windows]` says whose (documents.py), and
        `pooler_output` holds one vector per document; the hidden states stay per window.
        """
        inputs, document_windows = self._document_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions, kwargs
        )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        outputs, pooled = self.pooler.encode(self._backbone_call(inputs), inputs, output_hidden_states)
        return BaseModelOutputWithPooling(
            last_hidden_state=outputs.last_hidden_state,
            pooler_output=self.pooler.public_output(self.document_pooler(pooled, document_windows)),
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
        # Under the classifier, so that PEFT's SEQ_CLS task trains and saves it with the pooler and the head.
        self.document_pooler = build_document_pooler(config, self.pooler.output_dim)
        head_class = self.pooler.head_class or HEADS.lookup(config.classifier_head)
        self.head = head_class(config, self.pooler.output_dim)
        self.dropout_samples = config.classifier_dropout_samples
        # Read through self.pooler at each call (not kept as a bound method): PEFT and offloading may wrap the pooler.
        self.calibrates = hasattr(self.pooler, "calibrate")

    def forward(
        self,
        call: BackboneCall,
        inputs: dict[str, Any],
        output_hidden_states: bool,
        document_windows: torch.Tensor | None = None,
    ):
        outputs, pooled = self.pooler.encode(call, inputs, output_hidden_states)
        pooled = self.document_pooler(pooled, document_windows)
        logits = self.logits(pooled)
        if self.calibrates:  # label text's seen-label margin (label_text_margin.py)
            logits = self.pooler.calibrate(logits, inputs)
        return outputs, pooled, logits

    def logits(self, pooled: torch.Tensor) -> torch.Tensor:
        """The head's logits for pooled vectors (averaged over dropout samples in training)."""
        return multi_sample_logits(self.head, pooled, self.dropout_samples)


class PooledForSequenceClassification(SentenceEncoderMixin, PooledPreTrainedModel):
    """Backbone + pooler + classification head, for regression, single- and multi-label classification."""

    _legacy_key_mapping = {
        r"^pooled\.backbone\.": "backbone.",
        r"^pooled\.pooler\.": "classifier.pooler.",
        r"^classifier\.(?!pooler\.|head\.|document_pooler\.)": "classifier.head.",  # 0.1: the head was the classifier
        r"^pooler\.": "classifier.pooler.",  # a PooledModel checkpoint: its pooler, with a new head
        r"^document_pooler\.": "classifier.document_pooler.",
        **_POOLER_KEYS_0_1,
    }
    takes_flat_batches = True

    def __init__(self, config: PooledConfig, backbone: PreTrainedModel | None = None):
        super().__init__(config)
        self.num_labels = config.num_labels
        self._set_backbone(config, backbone)
        self.classifier = PooledClassifier(config)
        self.classifier.pooler.check_backbone(self.backbone, self.position_budget)
        self.classifier.pooler.connect(self)
        check_window_fits(config, self.position_budget, self.pooler.added_tokens)
        self._remember_structure()
        self.post_init()

    @property
    def pooler(self) -> Pooler:
        return self.classifier.pooler

    @property
    def document_pooler(self) -> nn.Module:
        return self.classifier.document_pooler

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
        r"""
        In document mode the rows are windows and `document_windows` `[documents, max_windows]` says whose
        (documents.py): the logits and the loss are one per document.
        """
        inputs, document_windows = self._document_inputs(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_attentions, kwargs
        )
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        outputs, _, logits = self.classifier(
            self._backbone_call(inputs), inputs, output_hidden_states, document_windows
        )
        loss = None
        if labels is not None:
            labels = as_label_tensor(labels)
            # Labels given at call time (pooling="label_text") are the ones the targets refer to.
            num_labels = logits.shape[-1]
            if num_labels != self.num_labels and getattr(self.config, "pos_weight", None) is not None:
                raise ValueError(
                    f"pos_weight holds one weight per label of the model ({self.num_labels}); the {num_labels} labels "
                    "given at call time have none: train on them without pos_weight."
                )
            problem_type = self.config.problem_type or infer_problem_type(labels, num_labels)
            targets = check_labels(labels, problem_type, num_labels, logits.shape[0])
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
