"""The private parts of transformers' Trainer that PooledTrainer relies on, and the DataLoader settings it keeps. Each
check fails when transformers changes what train.py relies on (a renamed method, another signature, a dataloader that
no longer asks for it), so that the change shows here rather than as batches that silently lose their length grouping,
and when a loader PooledTrainer re-batches loses a setting Trainer gave it."""

import inspect
from functools import partial

import pytest
import torch
from torch.utils.data import DataLoader
from transformers import Trainer

from pooled_models.train.trainer import PooledTrainer, rebatched

# The private methods PooledTrainer overrides -> the parameters it passes on (their names, in order).
OVERRIDDEN = {
    "_get_train_sampler": ["self", "train_dataset"],
    "_get_eval_sampler": ["self", "eval_dataset"],
    "_get_dataloader": ["self", "dataset", "description", "batch_size", "sampler_fn", "is_training"],
    "_build_accelerator_args": ["self"],
}
# The public methods that must reach them: what Trainer calls them from.
CALLERS = {
    "_get_train_sampler": ["get_train_dataloader"],
    "_get_eval_sampler": ["get_eval_dataloader", "get_test_dataloader"],
    "_get_dataloader": ["get_train_dataloader", "get_eval_dataloader", "get_test_dataloader"],
    "_build_accelerator_args": ["create_accelerator_and_postprocess"],
}


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_trainer_still_has_each_overridden_method_with_its_signature(name):
    parameters = list(inspect.signature(getattr(Trainer, name)).parameters)
    assert parameters[: len(OVERRIDDEN[name])] == OVERRIDDEN[name]
    ours = list(inspect.signature(getattr(PooledTrainer, name)).parameters)
    assert ours[: len(OVERRIDDEN[name])] == OVERRIDDEN[name]


@pytest.mark.parametrize("name", sorted(CALLERS))
def test_trainer_still_builds_its_dataloaders_through_them(name):
    for caller in CALLERS[name]:
        assert name in inspect.getsource(getattr(Trainer, caller)), (caller, name)


def test_the_public_parts_the_evaluation_uses_are_still_there():
    # evaluate runs Trainer's own evaluation_loop on each task's loader and reports through log and on_evaluate.
    assert list(inspect.signature(Trainer.evaluation_loop).parameters)[:6] == [
        "self",
        "dataloader",
        "description",
        "prediction_loss_only",
        "ignore_keys",
        "metric_key_prefix",
    ]
    assert "self.callback_handler" in inspect.getsource(Trainer.__init__)


def test_no_other_private_trainer_method_is_overridden():
    """A new private override needs a reason in trainer.py and a check here."""
    private = {
        name
        for name, value in vars(PooledTrainer).items()
        if name.startswith("_") and not name.startswith("__") and callable(value) and hasattr(Trainer, name)
    }
    assert private <= set(OVERRIDDEN), private - set(OVERRIDDEN)


def _seed(worker_id):
    pass


def test_a_rebatched_loader_keeps_every_setting_of_the_loader_it_replaces():
    # Every DataLoader setting but the batching ones: a new torch setting fails here until rebatched copies it.
    batching = {"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"}
    settings = set(inspect.signature(DataLoader.__init__).parameters) - batching
    given = {
        "num_workers": 2,
        "collate_fn": list,
        "pin_memory": True,
        "timeout": 5.0,
        "worker_init_fn": partial(_seed),
        "multiprocessing_context": "spawn",
        "generator": torch.Generator().manual_seed(3),
        "prefetch_factor": 3,
        "persistent_workers": True,
        "pin_memory_device": "",
        "in_order": False,
    }
    assert set(given) == settings
    loader = DataLoader(list(range(10)), batch_size=4, **given)
    again = rebatched(loader, [[0, 1], [2, 3, 4]])
    for name in settings - {"multiprocessing_context"}:
        assert getattr(again, name) == getattr(loader, name), name
    assert again.multiprocessing_context is loader.multiprocessing_context
    assert list(again.batch_sampler) == [[0, 1], [2, 3, 4]] and again.dataset is loader.dataset


def test_trainer_still_hands_torch_compiles_settings_over_in_the_accelerator_arguments():
    # PooledTrainer compiles each length bucket's shape statically by changing that plugin (trainer.py).
    assert 'args["dynamo_plugin"]' in inspect.getsource(Trainer._build_accelerator_args)
