"""Scaling as Transformers does it: a saved pooled classifier loads sharded with ``from_pretrained(...,
distributed_config=DistributedConfig(fsdp_size=2))`` (FSDP2) and, on a backbone with a tensor-parallel plan (Llama),
``DistributedConfig(tp_size=2)``, on 2 CPU processes over gloo; and ``_no_split_modules`` names the backbone's
layer classes, which FSDP auto-wrap and ``device_map="auto"`` read."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import REPO, tiny_backbone_config, tiny_multitask_model

from pooled_models import (
    PooledConfig,
    PooledForSequenceClassification,
    PooledForTokenClassification,
    PooledModel,
)

# Without dropout a training step is deterministic, so the 2-process step can be compared with one process's.
NO_DROPOUT = {
    "bert": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    # intermediate_size even: tensor parallelism splits the MLP's columns over the 2 processes
    "llama": {"attention_dropout": 0.0, "intermediate_size": 64},
}
CASES = {  # name -> (backbone, pooling, DistributedConfig's arguments)
    "fsdp": ("bert", "mean", {"fsdp_size": 2}),
    # tp_size with the model's own plan: the form every transformers of the declared range takes (5.16.0's
    # DistributedConfig fails on tp_plan="auto" without a tp_size; 5.16.1 fills it in)
    "tp": ("llama", "last_token", {"tp_size": 2}),
}
LEARNING_RATE = 0.5

# Run by each of the 2 processes (torch.distributed.run sets RANK, WORLD_SIZE...; transformers starts the process
# group with the gloo backend on CPU). Every process sees the same batch.
WORKER = """
import json, sys, torch
from transformers.distributed import DistributedConfig
from pooled_models import PooledForSequenceClassification

folder = sys.argv[1]
cases, learning_rate = json.load(open(f"{folder}/cases.json"))
batch = torch.load(f"{folder}/batch.pt")
report = {}
for name, (backbone, pooling, arguments) in cases.items():
    model = PooledForSequenceClassification.from_pretrained(
        f"{folder}/{name}", distributed_config=DistributedConfig(**arguments)
    )
    rank = torch.distributed.get_rank()
    # Before any forward pass: FSDP2 leaves the root module's parameters unsharded after a forward pass without
    # gradients, and an optimizer built then would hold those, not the sharded ones it steps.
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)

    def full(tensor):
        return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().clone()

    with torch.no_grad():
        logits = full(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits)
    if hasattr(model, "reshard"):
        model.reshard()
    before = {key: full(value) for key, value in model.named_parameters()}
    model.train()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    model.eval()
    after = {key: full(value) for key, value in model.named_parameters()}
    with torch.no_grad():
        stepped = full(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits)
    model.save_pretrained(f"{folder}/{name}-trained")
    report[name] = {
        "wrapped": type(model).__name__,
        "sharded": sum(type(value).__name__ == "DTensor" for value in model.parameters()),
        "parameters": len(before),
        "changed": sum(not torch.equal(before[key], after[key]) for key in before),
        "loss": loss.item(),
        "logits": logits.tolist(),
        "stepped": stepped.tolist(),
    }
json.dump(report, open(f"{folder}/report-{rank}.json", "w"))
torch.distributed.barrier()
torch.distributed.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def classifier(backbone: str, pooling: str) -> PooledForSequenceClassification:
    torch.manual_seed(0)
    config = PooledConfig(
        backbone_config=tiny_backbone_config(backbone, **NO_DROPOUT[backbone]),
        pooling=pooling,
        num_labels=3,
        classifier_dropout=0.0,
    )
    return PooledForSequenceClassification(config).eval()


def one_process_step(model, batch):
    """The same SGD step on one process: the logits after it."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    model.train()
    model(**batch).loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


@pytest.mark.slow  # two processes, each loading two models (about 30 s on 2 cores)
def test_fsdp_and_tensor_parallel_loading_train_and_save_like_one_process(tmp_path):
    torch.manual_seed(1)
    batch = {
        "input_ids": torch.randint(5, 99, (4, 9)),
        "attention_mask": torch.ones(4, 9, dtype=torch.long),
        "labels": torch.tensor([0, 2, 1, 2]),
    }
    batch["attention_mask"][1, 6:] = 0  # a padded row
    torch.save(batch, tmp_path / "batch.pt")
    (tmp_path / "cases.json").write_text(json.dumps([CASES, LEARNING_RATE]))
    (tmp_path / "worker.py").write_text(textwrap.dedent(WORKER))
    expected = {}
    for name, (backbone, pooling, _) in CASES.items():
        model = classifier(backbone, pooling)
        model.save_pretrained(tmp_path / name)
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        expected[name] = (logits, one_process_step(model, batch))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    command += ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    result = subprocess.run(
        [*command, str(tmp_path / "worker.py"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-5000:]

    reports = [json.loads((tmp_path / f"report-{rank}.json").read_text()) for rank in (0, 1)]
    for name, (logits, stepped) in expected.items():
        for report in (ranks[name] for ranks in reports):
            assert report["sharded"] > 0, report  # the processes really held shards
            torch.testing.assert_close(torch.tensor(report["logits"]), logits, atol=1e-5, rtol=1e-5)
            assert torch.isfinite(torch.tensor(report["loss"]))
            assert report["changed"] == report["parameters"], report  # every parameter got its step
            torch.testing.assert_close(torch.tensor(report["stepped"]), stepped, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(
            stepped, logits
        )  # the step changed the outputs: the comparison above can fail
        assert reports[0]["fsdp"]["wrapped"].startswith("FSDP")
        # Saved from both processes, it loads on one as an ordinary checkpoint with the trained weights.
        reloaded = PooledForSequenceClassification.from_pretrained(tmp_path / f"{name}-trained")
        assert getattr(reloaded.config, "distributed_config", None) is None
        with torch.no_grad():
            again = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        torch.testing.assert_close(again, stepped, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------------
# _no_split_modules: the backbone's layer classes, for FSDP auto-wrap and device_map="auto"
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backbone", "layer_classes"),
    [("bert", {"BertLayer"}), ("llama", {"LlamaDecoderLayer"}), ("roberta", {"RobertaLayer"})],
)
def test_no_split_modules_name_the_backbones_layers(backbone, layer_classes):
    config = PooledConfig(backbone_config=tiny_backbone_config(backbone), num_labels=3)
    backbone_class = type(PooledModel(config).backbone)
    for model_class in (PooledModel, PooledForSequenceClassification, PooledForTokenClassification):
        model = model_class(PooledConfig(backbone_config=tiny_backbone_config(backbone), num_labels=3))
        assert layer_classes <= set(model._no_split_modules)
        assert set(model._no_split_modules) == set(backbone_class._no_split_modules)
    multitask = tiny_multitask_model(backbone)
    assert set(multitask._no_split_modules) == set(backbone_class._no_split_modules)


def test_accelerate_fsdp_auto_wrap_finds_the_layers_without_naming_them():
    """accelerate's TRANSFORMER_BASED_WRAP without --fsdp_transformer_layer_cls_to_wrap reads _no_split_modules: FSDP1
    (set_auto_wrap_policy) and FSDP2 (fsdp2_prepare_auto_wrap_policy) wrap each layer. (accelerate applies FSDP on
    accelerators only, so no CPU run can show it; DistributedConfig(fsdp_size=2) above shards on CPU.)"""
    from accelerate.utils.dataclasses import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy

    model = PooledForSequenceClassification(
        PooledConfig(backbone_config=tiny_backbone_config("bert"), num_labels=3)
    )
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", fsdp_version=1)
    plugin.set_auto_wrap_policy(model)
    assert {layer.__name__ for layer in plugin.auto_wrap_policy.keywords["transformer_layer_cls"]} >= {
        "BertLayer"
    }

    policy = fsdp2_prepare_auto_wrap_policy(
        FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap", fsdp_version=2), model
    )
    wrapped = [name for name, module in model.named_modules() if policy(module)]
    assert {"backbone.encoder.layer.0", "backbone.encoder.layer.1"} <= set(wrapped), wrapped
    assert not any(name.startswith("classifier") for name in wrapped)


def split_layers(placement: dict) -> list[str]:
    """The entries of a device map inside a layer (``backbone.encoder.layer.1.attention``): a layer split up."""
    return [key for key in placement if ".layer." in key and "." in key.split(".layer.")[1]]


def test_device_map_auto_keeps_each_layer_whole_when_it_offloads(tmp_path):
    from accelerate import infer_auto_device_map

    torch.manual_seed(0)
    config = PooledConfig(
        backbone_config=tiny_backbone_config("bert", num_hidden_layers=4), pooling="attention", num_labels=3
    )
    model = PooledForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path / "model")
    batch = {"input_ids": torch.randint(5, 99, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    with torch.no_grad():
        expected = model(**batch).logits
    # Room for the embeddings and about one layer (less accelerate's reserve for the largest layer): the rest goes
    # to disk, and without _no_split_modules a layer would be cut in the middle.
    budget = 3 * sum(p.numel() * 4 for p in model.backbone.encoder.layer[0].parameters())
    control = infer_auto_device_map(
        model, max_memory={"cpu": budget, "disk": 10**9}, no_split_module_classes=[]
    )
    assert split_layers(control), control
    offloaded = PooledForSequenceClassification.from_pretrained(
        tmp_path / "model",
        device_map="auto",
        max_memory={"cpu": budget},
        offload_folder=str(tmp_path / "offload"),
    )
    placement = offloaded.hf_device_map
    assert "disk" in placement.values() and "cpu" in placement.values(), placement
    assert not split_layers(placement), placement
    with torch.no_grad():
        torch.testing.assert_close(offloaded(**batch).logits, expected)
