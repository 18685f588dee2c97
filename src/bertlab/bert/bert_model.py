"""The layer, the stack of layers, the pooler and the whole BertModel."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertlab.bert import recording
from bertlab.bert.attention_mask import bidirectional_mask
from bertlab.bert.attention_output import BertAttention
from bertlab.bert.config import BertConfig, require_encoder
from bertlab.bert.embeddings import BertEmbeddings
from bertlab.bert.feed_forward import BertIntermediate, BertOutput
from bertlab.bert.outputs import BaseModelOutputWithPastAndCrossAttentions, BaseModelOutputWithPoolingAndCrossAttentions
from bertlab.bert.self_attention import BertSelfAttention


class BertLayer(nn.Module):
    """One encoder layer: attention mixes the tokens, then the feed-forward network transforms each one."""

    gradient_checkpointing = False  # the attribute transformers' layers have; checkpointing is not implemented

    def __init__(self, config: BertConfig, layer_idx: int | None = None) -> None:
        super().__init__()
        require_encoder(config)
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.seq_len_dim = 1
        self.attention = BertAttention(config, is_causal=config.is_decoder, layer_idx=layer_idx)
        self.is_decoder = config.is_decoder
        self.add_cross_attention = config.add_cross_attention
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """(B, T, H) -> (B, T, H); ``attention_mask`` additive, (B, 1, T, T) or (B, 1, 1, T), or None.

        ``encoder_hidden_states`` and ``encoder_attention_mask`` are a decoder's: an encoder layer
        ignores them, as transformers' does.
        """
        attention_output, _ = self.attention(hidden_states, attention_mask, past_key_values=past_key_values, **kwargs)
        return apply_chunking_to_forward(
            self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output
        )

    def feed_forward_chunk(self, attention_output: torch.Tensor) -> torch.Tensor:
        """The feed-forward sub-layer on (part of) the sequence: (B, t, H) -> (B, t, H)."""
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, attention_output)


def apply_chunking_to_forward(forward_fn, chunk_size: int, chunk_dim: int, input_tensor: torch.Tensor) -> torch.Tensor:
    """``forward_fn(input_tensor)``, computed ``chunk_size`` positions at a time when chunk_size > 0.

    The feed-forward network treats every token alone, so slicing the sequence changes nothing but
    the peak memory of the (B, t, intermediate_size) activation; the slices are those transformers
    takes, so the results are the same bits.
    """
    if chunk_size <= 0:
        return forward_fn(input_tensor)
    length = input_tensor.shape[chunk_dim]
    if length % chunk_size != 0:
        raise ValueError(f"The dimension to be chunked {length} has to be a multiple of the chunk size {chunk_size}")
    chunks = input_tensor.chunk(length // chunk_size, dim=chunk_dim)
    return torch.cat([forward_fn(chunk) for chunk in chunks], dim=chunk_dim)


class BertEncoder(nn.Module):
    """The stack of ``num_hidden_layers`` BertLayers (``layer``), each reading the one before."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([BertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Run the layers in order on the embeddings output (B, T, H); returns last_hidden_state only.

        The hidden states of every layer and their attention probabilities are collected by BertModel
        (``output_hidden_states=True``...), not here: called alone, the encoder returns the last one.
        """
        if past_key_values is not None:
            raise NotImplementedError(
                "past_key_values is not supported: the course's BERT is an encoder, with no cache"
            )
        for layer_module in self.layer:
            hidden_states = layer_module(
                hidden_states,
                attention_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, past_key_values=None)


class BertPooler(nn.Module):
    """tanh(dense(first token's last hidden state)): one vector per sequence, the [CLS] position's."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, H)."""
        first_token_tensor = hidden_states[:, 0]  # (B, H)
        pooled_output = self.dense(first_token_tensor)
        return self.activation(pooled_output)


class BertModel(nn.Module):
    """Embeddings, the additive attention mask, the encoder and (``add_pooling_layer``) the pooler.

    Built from a config, its weights are drawn as transformers draws them (normal(0, initializer_range)
    for every linear and embedding matrix, zero biases, LayerNorm at identity), in the same order.
    """

    # What output_hidden_states and output_attentions collect, and from which modules (see recording).
    _can_record_outputs: dict[str, type[nn.Module]] = {"hidden_states": BertLayer, "attentions": BertSelfAttention}

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        require_encoder(config)
        self.config = config
        self.gradient_checkpointing = False

        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None

        self.apply(self._init_weights)  # children before parents, the order transformers initialises in

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range or 0.02
        if isinstance(module, nn.Linear):
            module.weight.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(mean=0.0, std=std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, BertEmbeddings):
            module.position_ids.copy_(torch.arange(module.position_ids.shape[-1]).expand((1, -1)))
            module.token_type_ids.zero_()

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions | tuple:
        """Encode a batch of token ids.

        Args:
            input_ids: (B, T) token ids; or ``inputs_embeds`` (B, T, H), exactly one of the two.
            attention_mask: (B, T), 1 for tokens and 0 for padding, or None (no padding); a 4-D
                additive mask is used as it is.
            token_type_ids: (B, T) segment ids, or None (all 0).
            position_ids: (B, T) or (1, T), or None (0, 1, ..., T - 1).
            encoder_hidden_states, encoder_attention_mask, use_cache: a decoder's; an encoder ignores them.
            past_key_values: a decoder's cache; not supported.
            **kwargs: ``output_hidden_states``, ``output_attentions`` (default: the config's),
                ``return_dict=False`` for a plain tuple; the rest is passed down to the layers.

        Returns:
            last_hidden_state (B, T, H) and pooler_output (B, H); with output_hidden_states=True also
            hidden_states, L + 1 tensors (B, T, H), the embeddings output first; with
            output_attentions=True also attentions, L tensors (B, heads, T, T), and cross_attentions=().
        """
        if past_key_values is not None:
            raise NotImplementedError(
                "past_key_values is not supported: the course's BERT is an encoder, with no cache"
            )
        # encoder_hidden_states, encoder_attention_mask and use_cache: unused by an encoder, as in transformers
        del encoder_hidden_states, encoder_attention_mask, use_cache
        return_dict = kwargs.pop("return_dict", getattr(self.config, "return_dict", True))
        collected = recording.requested(self, self._can_record_outputs, kwargs)
        with recording.collecting(collected):
            outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        recording.attach(self.config, outputs, collected)
        return outputs.to_tuple() if return_dict is False else outputs

    def _encode(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )  # (B, T, H)
        extended_mask = bidirectional_mask(attention_mask, embedding_output)  # (B, 1, T, T) or None

        encoder_outputs = self.encoder(
            embedding_output, attention_mask=extended_mask, position_ids=position_ids, **kwargs
        )
        sequence_output = encoder_outputs.last_hidden_state  # (B, T, H)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None  # (B, H)

        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=sequence_output, pooler_output=pooled_output
        )
