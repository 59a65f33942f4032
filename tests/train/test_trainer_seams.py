"""The private parts of transformers' Trainer that PooledTrainer and MultiTaskTrainer rely on. Each check fails when
transformers changes what train.py relies on (a renamed method, another signature, a dataloader that no longer asks
for it), so that the change shows here rather than as batches that silently lose their length grouping."""

import inspect

import pytest
from transformers import Trainer

from pooled_models.train.trainer import MultiTaskTrainer, PooledTrainer

# The private methods PooledTrainer overrides -> the parameters it passes on (their names, in order).
OVERRIDDEN = {
    "_get_train_sampler": ["self", "train_dataset"],
    "_get_eval_sampler": ["self", "eval_dataset"],
    "_get_dataloader": ["self", "dataset", "description", "batch_size", "sampler_fn", "is_training"],
}
# The public methods that must reach them: what Trainer calls them from.
CALLERS = {
    "_get_train_sampler": "get_train_dataloader",
    "_get_eval_sampler": "get_eval_dataloader",
    "_get_dataloader": "get_eval_dataloader",
}


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_trainer_still_has_each_overridden_method_with_its_signature(name):
    parameters = list(inspect.signature(getattr(Trainer, name)).parameters)
    assert parameters[: len(OVERRIDDEN[name])] == OVERRIDDEN[name]
    ours = list(inspect.signature(getattr(PooledTrainer, name)).parameters)
    assert ours[: len(OVERRIDDEN[name])] == OVERRIDDEN[name]


@pytest.mark.parametrize("name", sorted(CALLERS))
def test_trainer_still_builds_its_dataloaders_through_them(name):
    assert name in inspect.getsource(getattr(Trainer, CALLERS[name]))
    assert "_get_dataloader" in inspect.getsource(Trainer.get_test_dataloader)


def test_the_private_parts_the_multitask_trainer_uses_are_still_there():
    # get_train_dataloader removes unused columns as Trainer's does; evaluate measures memory as Trainer's does.
    assert list(inspect.signature(Trainer._get_collator_with_removed_columns).parameters)[:3] == [
        "self",
        "data_collator",
        "description",
    ]
    init = inspect.getsource(Trainer.__init__)
    assert "self._memory_tracker" in init
    assert "_train_batch_size" in init
    assert "evaluation_loop" in dir(Trainer)


def test_no_other_private_trainer_method_is_overridden():
    """A new private override needs a reason in trainer.py and a check here."""
    for cls in (PooledTrainer, MultiTaskTrainer):
        private = {
            name
            for name, value in vars(cls).items()
            if name.startswith("_")
            and not name.startswith("__")
            and callable(value)
            and hasattr(Trainer, name)
        }
        assert private <= set(OVERRIDDEN), (cls.__name__, private - set(OVERRIDDEN))
