"""How a ``PooledConfig``'s settings are validated: the rules that span fields (the settings of parts other than the
chosen ones refused, those of the chosen parts filled with their defaults and checked; dropout, the multi-label
numbers, packing, the text length), and edits read against a snapshot of the settings as last validated, so that a
setting an edit left behind is dropped rather than refused (see ``configuration_pooled.py``).

This file is copied next to saved checkpoints for ``trust_remote_code`` loading, so it imports only
torch, transformers (and its huggingface_hub) and its sibling model files.
"""

import copy
from typing import Any

from transformers.configuration_utils import PreTrainedConfig

from .document_settings import check_document_settings, chosen_window_pooling, stale_document_settings
from .heads import HEADS
from .losses import MULTI_LABEL_LOSSES
from .pooling import POOLINGS
from .problem_types import MULTI_LABEL
from .registry import LABEL_TOKEN_INITS, Registry
from .text_length import check_max_seq_length
from .window_pooling import WINDOW_POOLINGS

__all__ = ["SettingsValidation", "CHOICES", "PER_LABEL", "chosen_part"]

# Each registry and the setting that picks from it. PooledConfig checks every choice by looping over these. The window
# poolings last: a window pooling's defaults read the pooling's width, and it is chosen only in document mode.
CHOICES: tuple[Registry, ...] = (POOLINGS, HEADS, MULTI_LABEL_LOSSES, WINDOW_POOLINGS)


def chosen_part(config, registry: Registry) -> type | None:
    """The part ``registry`` picks for ``config`` (None: none applies, the window poolings outside document mode). A
    name no part has is refused, naming the valid ones."""
    if registry is WINDOW_POOLINGS:
        name = chosen_window_pooling(config)
        return None if name is None else registry.lookup(name)
    return registry.lookup(getattr(config, registry.setting))


# Settings with one value per label: they no longer fit when the number of labels changes.
PER_LABEL = (
    "label_token_init_ids",
    "label_tokens_per_pass",
    "label_text_ids",
    "label_descriptions",
    "pos_weight",
    "decision_threshold",
)


class SettingsValidation:
    """Mixed into ``PooledConfig``: its validation, and the snapshot edits are read against (the config gives its
    settings as ``_settings()``)."""

    def _validate(self) -> None:
        """Every check and default: settings that do not apply refused, those that apply filled in and checked."""
        self._check_dropout()
        check_document_settings(self)  # document mode on or off: whether a window pooling is chosen below
        for registry in CHOICES:
            self._check_choice(registry)
        self._check_multi_label()
        _check_packing(self)
        check_max_seq_length(self.max_seq_length)
        if self.initializer_range is None:
            self.initializer_range = getattr(self.backbone_config, "initializer_range", None) or 0.02

    def _settle(self, explicit: frozenset[str] | set[str] = frozenset()) -> None:
        """Validate the settings as they are now, and keep them as the snapshot later edits are read against.

        A new config is validated as given. After edits (the settings that differ from the snapshot, and
        ``explicit``: the load-time keywords), a setting the edits left behind is dropped: one of another pooling,
        head or loss than the chosen one, a per-label setting when the number of labels changed, a multi-label setting
        when the problem is not multi-label. The edited settings are kept, and refused if they do not apply.
        """
        previous = self.__dict__.get("_validated")
        if previous is not None:
            now = self._settings()
            edited = {name for name, value in now.items() if value != previous[name]} | set(explicit)
            labels_changed = len(self.id2label or {}) != len(previous["id2label"] or {})
            # A smaller vocabulary (resize_token_embeddings, config.vocab_size = n) may leave token ids behind.
            vocabulary_shrank = "vocab_size" in edited and not _fits_vocabulary(
                self.label_token_init_ids, now["vocab_size"]
            )
            for name in self._left_behind(edited, labels_changed, vocabulary_shrank):
                setattr(self, name, None)
            if self.problem_type not in (None, MULTI_LABEL) and "multi_label_loss" not in edited:
                self.multi_label_loss = "bce"
            if "id2label" in edited and self.id2label is not None:
                self.label2id = {label: index for index, label in self.id2label.items()}
        self._validate()
        # Private, kept out of config.json (to_dict): the settings as validated, which later edits are read against.
        self._validated = copy.deepcopy(self._settings())

    def _left_behind(self, edited: set[str], labels_changed: bool, vocabulary_shrank: bool) -> list[str]:
        chosen: dict[str, Any] = {}
        for registry in CHOICES:
            part = chosen_part(self, registry)
            chosen.update({} if part is None else part.options_for(self))
        stale = {name for registry in CHOICES for name in registry.every_option()} - set(chosen)
        if labels_changed:
            stale |= {name for name in PER_LABEL if name != "decision_threshold"}
            if isinstance(self.decision_threshold, list):
                stale.add("decision_threshold")  # one threshold for every label still applies
        if self.problem_type not in (None, MULTI_LABEL):
            stale |= {"pos_weight", "decision_threshold"} | MULTI_LABEL_LOSSES.every_option()
        if vocabulary_shrank:
            stale.add("label_token_init_ids")
        stale |= stale_document_settings(self)
        return sorted(name for name in stale - edited if getattr(self, name, None) is not None)

    @property
    def has_pending_changes(self) -> bool:
        """True when settings were changed (``config.x = y``, in place or not) since the config was last validated."""
        previous = self.__dict__.get("_validated")
        return previous is not None and previous != self._settings()

    def ensure_valid(self) -> None:
        """Validate the settings changed since the last validation (a no-op when none were). Building a model from
        the config, running it and saving it call this."""
        if self.has_pending_changes:
            self._settle()

    def _check_choice(self, registry: Registry) -> None:
        """The part chosen from ``registry``: settings of other parts refused, its own filled in, then checked."""
        part = chosen_part(self, registry)
        if part is None:  # no window pooling outside document mode: its settings were refused with the others
            return
        owner = f"{registry.setting}={getattr(self, registry.setting)!r}"
        self._fill_settings(owner, part.options_for(self), registry.every_option())
        part.check_config(self)

    def _fill_settings(self, owner: str, applicable: dict[str, Any], every: set[str]) -> None:
        """Reject settings of ``every`` that ``owner`` does not read, fill the ones it reads with their defaults."""
        for option in sorted(every - set(applicable)):
            if getattr(self, option, None) is not None:
                readers = [
                    reader
                    for registry in (*CHOICES, LABEL_TOKEN_INITS)
                    for reader in registry.readers_of(option)
                ]
                raise ValueError(
                    f"{option}={getattr(self, option)!r} does not apply to {owner}; it is a setting of "
                    f"{', '.join(readers)}. The settings of {owner} are: {', '.join(sorted(applicable)) or 'none'}."
                )
        # In declaration order: a default may depend on an earlier setting (label_token_init_ids on label_token_init).
        for option, default in applicable.items():
            if getattr(self, option, None) is None:
                try:
                    setattr(self, option, default(self) if callable(default) else default)
                except AttributeError as error:  # a default read off a backbone without that size (Perceiver)
                    raise ValueError(
                        f"{option} of {owner} defaults to a size the backbone's config does not have: {error}."
                    ) from error

    def _check_dropout(self) -> None:
        if self.classifier_dropout is None:
            self.classifier_dropout = _backbone_dropout(self.backbone_config)
        dropout = self.classifier_dropout
        if not 0 <= dropout < 1:
            raise ValueError(f"classifier_dropout must be a number in [0, 1), got {dropout!r}.")
        samples = self.classifier_dropout_samples
        if samples < 1:
            raise ValueError(
                f"classifier_dropout_samples must be an integer >= 1 (1: off, one dropout sample), got {samples!r}."
            )
        if samples > 1 and dropout == 0:
            raise ValueError(
                f"classifier_dropout_samples={samples} averages the head over dropout samples, but classifier_dropout "
                "is 0, so every sample would be the same: set classifier_dropout above 0 (e.g. 0.1), or "
                "classifier_dropout_samples=1."
            )

    def _check_multi_label(self) -> None:
        multi_label_only = {"pos_weight": self.pos_weight, "decision_threshold": self.decision_threshold}
        if self.multi_label_loss != "bce":
            multi_label_only["multi_label_loss"] = self.multi_label_loss
        if self.problem_type not in (None, MULTI_LABEL):
            for name, value in multi_label_only.items():
                if value is not None:
                    raise ValueError(
                        f"{name}={value!r} applies to problem_type={MULTI_LABEL!r} only, "
                        f"not to {self.problem_type!r}."
                    )
        _check_per_label_numbers(
            "pos_weight", self.pos_weight, self.num_labels, low=0, high=float("inf"), allow_single=False
        )
        _check_per_label_numbers(
            "decision_threshold", self.decision_threshold, self.num_labels, low=0, high=1, allow_single=True
        )


def _fits_vocabulary(token_ids: list[list[int]] | None, vocab_size: int | None) -> bool:
    return token_ids is None or vocab_size is None or all(i < vocab_size for ids in token_ids for i in ids)


def _check_per_label_numbers(
    name: str, value: Any, num_labels: int, low: float, high: float, allow_single: bool
):
    """``value`` is None, a number in (low, high) when ``allow_single``, or one such number per label."""
    if value is None:
        return
    values = [value] if allow_single and not isinstance(value, list) else value
    shape = "a number or a list of one number per label" if allow_single else "a list of one number per label"
    if not isinstance(values, list) or (isinstance(value, list) and len(values) != num_labels):
        raise ValueError(f"{name} must be {shape} ({num_labels} labels), got {value!r}.")
    for index, number in enumerate(values):
        if not low < number < high:
            where = f"{name}[{index}]" if isinstance(value, list) else name
            raise ValueError(f"{where} = {number!r} must be a number in ({low}, {high}).")


def _check_packing(config) -> None:
    """The positions of a packed row restart at each text only when they are counted from each text's mask."""
    if config.packed_batches and not config.position_ids_from_mask:
        raise ValueError(
            "packed_batches=True needs position_ids_from_mask=True: each text of a packed row starts again at the "
            "first position, which the positions counted from its own mask give."
        )


def _backbone_dropout(backbone_config: PreTrainedConfig) -> float:
    for name in ("classifier_dropout", "hidden_dropout_prob", "hidden_dropout", "dropout"):
        value = getattr(backbone_config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return 0.1
