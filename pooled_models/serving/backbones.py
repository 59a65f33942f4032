"""How the plugin builds, runs and loads a pooled checkpoint's backbone: vLLM's own implementation where it is exact
(``routes.kernel_architecture``), else the checkpoint's transformers module (``transformers_backbone.py``).

Every family's ``run`` returns ``[tokens, hidden]`` (transformers' ``last_hidden_state``), or for a layer pooling the
states it reads (``hidden_states[0]`` the embedding output, ``[i]`` layer i's output, as transformers numbers them)
side by side in one ``[tokens, k * hidden]`` tensor.

- BERT and the RoBERTa family: vLLM's ``BertModel``; the plugin runs its embeddings and layers itself for a layer pooling.
- ModernBERT: vLLM's ``ModernBertModel``, its layers looped likewise; its last hidden state is after the final norm.
- Llama, Qwen2, Qwen3, Gemma 3's text model: vLLM's own decoder, whose forward gives the final-norm states of the last
  layer. A layer pooling sets vLLM's aux-hidden-state hook (``EagleModelMixin.aux_hidden_state_layers``, what Eagle-3
  speculative decoding reads), which returns the residual stream after the chosen layers (index 0: the embeddings);
  Gemma 3's model has no such hook, so its layers are looped here.

vLLM's classes are imported when a family builds its model, so that the transformers route (and the package's tests of
it) runs where vLLM is not installed.
"""

from __future__ import annotations

from .backbone_base import Backbone
from .routes import AUX_HIDDEN_STATE_DECODERS, VLLM_ENCODERS, kernel_architecture
from .transformers_backbone import TransformersBackbone

__all__ = ["Backbone", "backbone_for"]


class BertFamilyBackbone(Backbone):
    """vLLM's BertModel, with RoBERTa's position offset (padding_idx + 1) for the RoBERTa family."""

    def build(self, vllm_config, prefix):
        from vllm.model_executor.models.bert import BertEmbedding, BertModel
        from vllm.model_executor.models.roberta import RobertaEmbedding

        config = vllm_config.with_hf_config(self.backbone_config(), architectures=[self.architecture])
        embedding_class = BertEmbedding if self.model_type == "bert" else RobertaEmbedding
        return BertModel(vllm_config=config, prefix=prefix, embedding_class=embedding_class)

    def run(self, module, input_ids, positions, inputs_embeds=None):
        hidden = module.embeddings(input_ids=input_ids, position_ids=positions, inputs_embeds=inputs_embeds)
        if self.layers is None:
            return module.encoder(hidden)
        states = {0: hidden}
        for index, layer in enumerate(module.encoder.layer, start=1):
            hidden = layer(hidden)
            states[index] = hidden
        return self._side_by_side(states)


class ModernBertBackbone(Backbone):
    """vLLM's ModernBertModel. Transformers' ModernBERT ends with a final norm, which its last hidden state (the
    last entry of hidden_states too) includes."""

    def model_class(self):
        from vllm.model_executor.models.modernbert import ModernBertModel

        return ModernBertModel

    def run(self, module, input_ids, positions, inputs_embeds=None):
        if self.layers is None and inputs_embeds is None:
            return module(input_ids=input_ids, positions=positions)
        # vLLM's ModernBertModel.forward takes inputs_embeds as its embedding layer's output (it skips the embeddings'
        # norm for them), while the label markers' are the token table's (as transformers' LabelTokenInput and vLLM's
        # embed_input_ids give them): the embeddings' norm runs here.
        hidden = module.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)
        if self.layers is None:
            return module(input_ids=input_ids, positions=positions, inputs_embeds=hidden)
        states = {0: hidden}
        layers = module.encoder_layer.layers
        for index, layer in enumerate(layers, start=1):
            hidden = layer(hidden, positions)
            states[index] = hidden
        states[len(layers)] = module.final_norm(hidden)
        return self._side_by_side(states)


class DecoderBackbone(Backbone):
    """vLLM's own decoder. For a layer pooling, its aux-hidden-state hook returns the layers before the last; the last
    (transformers' last hidden state) is the forward's own output, after the final norm."""

    def model_class(self):
        if self.model_type == "llama":
            from vllm.model_executor.models.llama import LlamaModel as model_class
        elif self.model_type == "qwen2":
            from vllm.model_executor.models.qwen2 import Qwen2Model as model_class
        elif self.model_type == "qwen3":
            from vllm.model_executor.models.qwen3 import Qwen3Model as model_class
        else:
            from vllm.model_executor.models.gemma3 import Gemma3Model as model_class
        return model_class

    def build(self, vllm_config, prefix):
        module = super().build(vllm_config, prefix)
        if self.layers is not None and self.model_type in AUX_HIDDEN_STATE_DECODERS:
            last = self.backbone_config().num_hidden_layers
            module._set_aux_hidden_state_layers(tuple(index for index in self.layers if index != last))
        return module

    def run(self, module, input_ids, positions, inputs_embeds=None):
        if self.layers is not None and self.model_type not in AUX_HIDDEN_STATE_DECODERS:
            return self._loop_layers(module, input_ids, positions, inputs_embeds)
        output = module(
            input_ids=input_ids, positions=positions, intermediate_tensors=None, inputs_embeds=inputs_embeds
        )
        if self.layers is None:
            return output
        last_hidden, aux = output if isinstance(output, tuple) else (output, [])
        states = dict(zip(module.aux_hidden_state_layers, aux, strict=True))
        states[self.backbone_config().num_hidden_layers] = last_hidden
        return self._side_by_side(states)

    def _loop_layers(self, module, input_ids, positions, inputs_embeds=None):
        """Gemma 3's vLLM model has no aux-hidden-state hook: its layers run here, each giving the residual stream as
        the pair (output, residual) of vLLM's fused add-norm, whose sum is transformers' hidden_states[i]."""
        hidden = module.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
        residual = None
        states = {0: hidden}
        for index, layer in enumerate(module.layers, start=1):
            hidden, residual = layer(positions, hidden, residual)
            states[index] = hidden + residual
        states[len(module.layers)] = module.norm(hidden, residual)[0]
        return self._side_by_side(states)

    def transformers_state(self, module, weights):
        if self.model_type != "gemma3":
            return weights
        # transformers' Gemma3Model holds its text model as language_model.*; the checkpoint's older layout (above)
        return {name.replace("language_model.model.", "language_model.", 1): w for name, w in weights.items()}

    def load_weights(self, module, weights):
        if self.model_type == "gemma3":
            # Gemma 3's composite model holds its text model under language_model (transformers saves it as
            # language_model.model.*, its older layout); the vision tower and projector have no place in vLLM's text
            # model, and a text classifier never runs them.
            weights = (
                (name.removeprefix("language_model.").removeprefix("model."), tensor)
                for name, tensor in weights
                if name.startswith("language_model.")
            )
        return super().load_weights(module, weights)


def backbone_for(pooled_config, layers: list[int] | None) -> Backbone:
    """The family that serves this pooled config's backbone exactly, for a pooling reading ``layers``."""
    architecture = kernel_architecture(pooled_config.backbone_config, layers)
    model_type = pooled_config.backbone_config.model_type
    if architecture is None:
        return TransformersBackbone(pooled_config, "transformers", layers)
    if model_type == "modernbert":
        return ModernBertBackbone(pooled_config, architecture, layers)
    if model_type in VLLM_ENCODERS:
        return BertFamilyBackbone(pooled_config, architecture, layers)
    return DecoderBackbone(pooled_config, architecture, layers)
