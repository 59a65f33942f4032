"""Document models over vLLM's own routes: ``/classify``, ``/v1/embeddings`` and ``/pooling`` (and ``LLM.classify`` /
``LLM.embed``) read a document model's whole text, as ``pipeline("text-classification")`` and ``encode`` do.

A document model (``document_window`` set, modeling/window_pooling.py) reads a text in overlapping windows and pools
the windows' vectors across the document. vLLM runs one prompt per request input, up to ``max_model_len`` tokens, and
has no hook for a classify or embed route that sends several prompts per input (its ``enable_chunked_processing``, for
embed only, averages chunks by their token counts). So the plugin hooks vLLM's classify and embed IO processors
(``ClassifyIOProcessor`` and ``EmbedIOProcessor``, which ``/classify``, ``/v1/embeddings``, ``/pooling`` and the
offline ``LLM`` all use): for a document model only, each input text is cut into the model's windows by the tokenizer
(``tokenize_documents``, as the pipeline cuts it), every window goes to the engine as a prompt of its own (the
``plugin`` task: the engine's pooler gives the window's vector, before any head, ``pooler.py``), and once the engine has
answered them all, the windows' vectors are pooled across each document by the checkpoint's own cross-window pooler and
answered by its own head (``PooledModelPooler.answer``, its weights read from the checkpoint here). Every other model
goes through vLLM's code unchanged.

A request's windows and its layout stay on the request's own serving context (``PoolingServeContext``), so two
requests in flight never see each other's. Refused with HTTP 400 (a ``ValueError`` naming the field): an empty
document (no window), a document of more than ``MAX_DOCUMENT_WINDOWS`` windows, token ids or chat messages instead of
text, and the request settings that would change a window (``truncate_prompt_tokens``, ``truncation_side``,
``padding``, ``add_special_tokens=false``). The scoring routes (``/score``, ``/rerank``, ``LLM.score``), which run a
text or a pair as one prompt, are refused for a document model.
"""

from __future__ import annotations

import functools
import threading

import torch
from vllm import PoolingParams
from vllm.outputs import PoolingOutput, PoolingRequestOutput
from vllm.renderers.inputs.preprocess import parse_model_prompt

from ..modeling.configuration_pooled import PooledConfig
from ..modeling.documents import document_windows_from, tokenize_documents
from .document_support import MAX_DOCUMENT_WINDOWS, is_document_model
from .pooler import PLUGIN_TASK, LogitCalibration, PooledModelPooler
from .support import served_tasks

__all__ = ["DocumentRoute", "install_document_route", "hooked_pairs", "document_texts"]

# Request settings that would change a window's prompt: refused for a document model.
WINDOW_CHANGING = ("truncate_prompt_tokens", "truncation_side", "padding")
_NOT_BUILT = object()
_install_lock = threading.Lock()


class DocumentRoute:
    """A document model's windows and their pooling outside the engine (one per IO processor, built on its first
    request)."""

    def __init__(self, model_config, tokenizer):
        self.config = model_config.hf_config
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.pooler = _checkpoint_pooler(model_config)

    def windows(self, texts: list[str]) -> list[list[list[int]]]:
        """Each text's windows' token ids, as the pipeline cuts them; a ``ValueError`` naming the input for an empty
        text or one past ``MAX_DOCUMENT_WINDOWS`` windows."""
        window, stride = self.config.document_window, self.config.document_stride
        try:
            documents = tokenize_documents(self.tokenizer, texts, window, stride)["input_ids"]
        except ValueError as error:  # an empty text: tokenize_documents names it texts[i]
            raise ValueError(f"input: {str(error).replace('texts[', 'input[')}") from None
        for index, ids in enumerate(documents):
            if len(ids) > MAX_DOCUMENT_WINDOWS:
                raise ValueError(
                    f"input[{index}] is {len(ids)} windows long (document_window={window}, document_stride={stride}); "
                    f"this server reads at most {MAX_DOCUMENT_WINDOWS} windows of a document (MAX_DOCUMENT_WINDOWS): "
                    f"about {MAX_DOCUMENT_WINDOWS * (window - stride)} tokens. Send it in parts."
                )
        return documents

    def answers(
        self, outputs: list[PoolingRequestOutput], counts: list[int], params: PoolingParams, request_id: str
    ) -> list[PoolingRequestOutput]:
        """One output per document from the engine's outputs for its windows (in order, ``counts`` per document):
        the checkpoint's cross-window pooling, then its head (classify) or its normalisation (embed)."""
        if len(outputs) != sum(counts):
            raise RuntimeError(f"the engine answered {len(outputs)} windows of {sum(counts)}")
        vectors = torch.stack([output.outputs.data for output in outputs]).float()
        layout = document_windows_from([doc for doc, count in enumerate(counts) for _ in range(count)])
        with torch.inference_mode():
            rows = self.pooler.answer(vectors, [params] * len(counts), layout)
        answered, start = [], 0
        for index, (count, row) in enumerate(zip(counts, rows, strict=True)):
            tokens = [token for output in outputs[start : start + count] for token in output.prompt_token_ids]
            answered.append(
                PoolingRequestOutput(
                    request_id=f"{request_id}-{index}",
                    outputs=PoolingOutput(data=row),
                    prompt_token_ids=tokens,
                    num_cached_tokens=0,
                    finished=True,
                )
            )
            start += count
        return answered

    def window_prompts(self, documents: list[list[list[int]]]) -> list:
        return [
            parse_model_prompt(self.model_config, {"prompt_token_ids": list(ids)})
            for windows in documents
            for ids in windows
        ]


def _checkpoint_pooler(model_config) -> PooledModelPooler:
    """The engine's pooler of this checkpoint (the token pooler, the cross-window pooler and the head), in float32
    on the CPU, with its weights read from the checkpoint under the names the engine loads them by."""
    from .model import ServedPooledClassifier, ServedPooledModel

    served = {model.architecture: model for model in (ServedPooledClassifier, ServedPooledModel)}
    architecture = model_config.hf_config.architectures[0]
    model = served[architecture]
    pooling, head = model.pooled_parts(model_config.hf_config)
    pooler = PooledModelPooler(model_config.hf_config, pooling, head, served_tasks(architecture), None, 0)
    pooler.calibrate = LogitCalibration(model_config.pooler_config)
    pooler.load_state_dict(_own_weights(model_config, model), strict=True)
    return pooler.float().eval()


def _own_weights(model_config, model) -> dict[str, torch.Tensor]:
    from .checkpoint_keys import checkpoint_weights

    return checkpoint_weights(model_config, model.pooler_name)


def document_texts(request) -> list[str]:
    """The documents of a classify or embed request: its ``input`` text(s); a ``ValueError`` naming what is refused."""
    name = type(request).__name__
    if getattr(request, "messages", None) is not None or not hasattr(request, "input"):
        raise ValueError(
            f"a document model reads text in its 'input' field (strings); this {name} has none: send the documents "
            "as text."
        )
    for field in WINDOW_CHANGING:
        if getattr(request, field, None) is not None:
            raise ValueError(
                f"{field}: a document model reads every window of a document, cut as the model's document_window and "
                "document_stride say; send the request without it."
            )
    if getattr(request, "add_special_tokens", True) is False:
        raise ValueError(
            "add_special_tokens=false: a document model's windows each carry the tokenizer's special tokens, as in "
            "training; send the request without it."
        )
    texts = [request.input] if isinstance(request.input, str) else request.input
    if not texts or not all(isinstance(text, str) for text in texts):
        raise ValueError(
            "input: a document model reads text (a string or a list of strings), cut into its windows by its "
            "tokenizer; token ids are not taken."
        )
    return list(texts)


# -- the hooks into vLLM's IO processors ---------------------------------------------------------------------------


def _route(processor) -> DocumentRoute | None:
    """The processor's document route (None for a model without document mode: vLLM's own code runs)."""
    route = processor.__dict__.get("_pooled_document_route", _NOT_BUILT)
    if route is _NOT_BUILT:
        model_config = processor.model_config
        route = None
        if isinstance(model_config.hf_config, PooledConfig) and is_document_model(model_config.hf_config):
            route = DocumentRoute(model_config, processor.renderer.get_tokenizer())
        processor._pooled_document_route = route
    return route


def _request_factory_online(route: DocumentRoute, processor, ctx):
    from vllm.entrypoints.pooling.typing import EncodeCMPLRenderParams

    texts = document_texts(ctx.request)
    documents = route.windows(texts)
    counts = [len(windows) for windows in documents]
    ctx.pooled_document_counts = counts  # the request's own layout, read back in post_process_online
    tok_params = ctx.request.build_tok_params(processor.model_config)
    loras = processor._lora_request_to_seq(ctx.lora_request, len(texts))
    priorities = processor._priority_to_seq(ctx.priorities, len(texts))
    prompts = iter(route.window_prompts(documents))
    return [
        EncodeCMPLRenderParams(
            prompts=next(prompts),
            tok_params=tok_params,
            prompt_extras=ctx.prompt_extras,
            skip_mm_cache=False,
            params=PoolingParams(task=PLUGIN_TASK),
            lora_requests=loras[document],
            priorities=priorities[document],
        )
        for document, count in enumerate(counts)
        for _ in range(count)
    ]


def _post_process_online(route: DocumentRoute, processor, ctx) -> None:
    ctx.final_res_batch = route.answers(
        ctx.final_res_batch, ctx.pooled_document_counts, ctx.pooling_params, ctx.request_id
    )


def _request_factory_offline(route: DocumentRoute, processor, ctx):
    from vllm.entrypoints.pooling.typing import OfflineEncodeInputsContext

    texts = [ctx.prompts] if isinstance(ctx.prompts, str) else list(ctx.prompts)
    if not texts or not all(isinstance(text, str) for text in texts):
        raise ValueError(
            "a document model reads text prompts (strings), cut into its windows by its tokenizer."
        )
    if isinstance(ctx.lora_request, list) or not isinstance(ctx.pooling_params, PoolingParams | None):
        raise ValueError("a document model takes one PoolingParams and one lora_request for all its prompts.")
    documents = route.windows(texts)
    params = (ctx.pooling_params or PoolingParams()).clone()
    params.task = params.task or ctx.pooling_task
    params.verify(processor.model_config)
    # LLM runs one call at a time: the layout waits here for post_process_offline.
    processor._pooled_offline_layout = ([len(windows) for windows in documents], params)
    windows = OfflineEncodeInputsContext(
        prompts=route.window_prompts(documents),
        pooling_params=PoolingParams(task=PLUGIN_TASK),
        pooling_task=PLUGIN_TASK,
        tokenization_kwargs=None,
        lora_request=ctx.lora_request,
        priorities=None,
    )
    return _ORIGINALS[type(processor).__name__, "get_request_factory_offline"](processor, windows)


def _post_process_offline(route: DocumentRoute, processor, ctx) -> list[PoolingRequestOutput]:
    counts, params = processor.__dict__.pop("_pooled_offline_layout")
    return route.answers(list(ctx.outputs), counts, params, "offline")


def _refuse_scoring(route: DocumentRoute, processor, ctx):
    raise ValueError(
        "the scoring API (/score, /rerank, LLM.score) is not served for a document model: it runs each text (or pair) "
        "as one prompt, and a document model reads a text in windows. Embed the texts (/v1/embeddings, LLM.embed: "
        "the model's document vectors) and compare them, or classify each text (/classify)."
    )


_HOOKS = {
    "get_request_factory_online": _request_factory_online,
    "post_process_online": _post_process_online,
    "get_request_factory_offline": _request_factory_offline,
    "post_process_offline": _post_process_offline,
}
# The scoring routes' processors: refused for a document model (one prompt per text or pair).
_SCORING_HOOKS = {
    "get_request_factory_online": _refuse_scoring,
    "get_request_factory_offline": _refuse_scoring,
}
_ORIGINALS: dict[tuple[str, str], object] = {}


def hooked_methods() -> dict[type, dict[str, object]]:
    """vLLM's IO processor classes and, for each, the methods install_document_route replaces (with their hooks)."""
    from vllm.entrypoints.pooling.classify.io_processor import ClassifyIOProcessor
    from vllm.entrypoints.pooling.embed.io_processor import EmbedIOProcessor
    from vllm.entrypoints.pooling.scoring.io_processor import BiEncoderIOProcessor, CrossEncoderIOProcessor

    hooks = {ClassifyIOProcessor: _HOOKS, EmbedIOProcessor: _HOOKS}
    return hooks | {BiEncoderIOProcessor: _SCORING_HOOKS, CrossEncoderIOProcessor: _SCORING_HOOKS}


def hooked_pairs() -> list[tuple[type, str]]:
    """(class, method) for each method install_document_route replaces: what the plugin checks before patching."""
    return [(owner, name) for owner, methods in hooked_methods().items() for name in methods]


def install_document_route(undo=None) -> None:
    """Hook vLLM's classify and embed IO processors (once per process): a document model's requests go through the
    document route, every other model's through vLLM's own methods. ``undo`` (compatibility.Undo) keeps what is
    replaced, so that a later failure of register() can put it back."""
    with _install_lock:
        for processor_class, methods in hooked_methods().items():
            for name, hook in methods.items():
                key = (processor_class.__name__, name)
                if key not in _ORIGINALS:
                    if undo is not None:
                        undo.keep_attribute(processor_class, name)
                        undo.keep_item(_ORIGINALS, key)
                    _ORIGINALS[key] = getattr(processor_class, name)
                    setattr(processor_class, name, _hooked(_ORIGINALS[key], hook))


def _hooked(original, hook):
    @functools.wraps(original)
    def method(self, ctx):
        route = _route(self)
        return original(self, ctx) if route is None else hook(route, self, ctx)

    return method
