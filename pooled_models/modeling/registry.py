"""Registries of the model's pluggable parts: poolings, classification heads, multi-label losses and label-token
initialisations, each filled by a decorator next to the part's definition.

A registered part is a class that says which ``PooledConfig`` settings it reads (``config_options``: name ->
default, a constant or a function of the config) and checks their values (``check_config``). ``PooledConfig``
validates every choice by looping over the registries, so a part a user registers
(``@POOLINGS.register("my_pooling")``) has its settings checked, filled in and saved like a built-in one, and a
setting of another part is refused.

This file is copied next to saved checkpoints for ``trust_remote_code`` loading; it imports no implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar

__all__ = ["Component", "Registry", "POOLINGS", "HEADS", "MULTI_LABEL_LOSSES", "LABEL_TOKEN_INITS"]

# A setting's default: a constant, or a function of the config (for defaults that depend on the backbone).
OptionDefault = Any


class Component:
    """What every registered part says about itself. Subclasses override what differs."""

    name: ClassVar[str] = ""  # set by Registry.register
    config_options: ClassVar[dict[str, OptionDefault]] = {}

    @classmethod
    def options_for(cls, config) -> dict[str, OptionDefault]:
        """The settings this part reads for ``config``, with their defaults, in the order they are filled in (a
        default may depend on an earlier setting)."""
        return dict(cls.config_options)

    @classmethod
    def every_option(cls) -> set[str]:
        """Every setting this part may read, for any config; ``PooledConfig`` refuses those of other parts."""
        return set(cls.config_options)

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ``ValueError`` for a setting out of range; called once the defaults are filled in."""


class Registry(MutableMapping[str, type]):
    """Name -> part class, for the ``PooledConfig`` setting ``setting``. Reads like a dict; ``register`` refuses a
    name twice, ``lookup`` names the valid choices when a name is unknown."""

    def __init__(self, setting: str):
        self.setting = setting
        self._parts: dict[str, type] = {}

    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: makes the class available as ``PooledConfig(<setting>=name)``."""

        def add(cls: type) -> type:
            if name in self._parts:
                raise ValueError(
                    f"{self.setting} {name!r} is already registered by {self._parts[name].__qualname__}"
                )
            self[name] = cls
            return cls

        return add

    def lookup(self, name: str) -> type:
        if name not in self._parts:
            raise ValueError(
                f"Unknown {self.setting} {name!r}. Valid choices: {', '.join(sorted(self._parts))}."
            )
        return self._parts[name]

    def every_option(self) -> set[str]:
        """The settings any registered part may read."""
        return set().union(*(part.every_option() for part in self._parts.values()))

    def readers_of(self, option: str) -> list[str]:
        """The registered parts that may read ``option``, as ``setting='name'``."""
        return [
            f"{self.setting}={name!r}" for name, part in self._parts.items() if option in part.every_option()
        ]

    def __getitem__(self, name: str) -> type:
        return self._parts[name]

    def __setitem__(self, name: str, cls: type) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Component)):
            raise TypeError(f"a {self.setting} must be a Component subclass, got {cls!r}")
        cls.name = name
        self._parts[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __repr__(self) -> str:
        return f"Registry({self.setting!r}: {', '.join(self._parts)})"


POOLINGS = Registry("pooling")
HEADS = Registry("classifier_head")
MULTI_LABEL_LOSSES = Registry("multi_label_loss")
LABEL_TOKEN_INITS = Registry("label_token_init")
