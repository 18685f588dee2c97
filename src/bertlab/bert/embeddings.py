"""BertEmbeddings: a token's vector is its word's, plus its position's, plus its segment's, normalised."""

from __future__ import annotations

import torch
from torch import nn

from bertlab.bert.config import BertConfig


class BertEmbeddings(nn.Module):
    """word + token type + position embeddings, then LayerNorm and dropout.

    ``position_ids`` (0, 1, ..., P - 1) and ``token_type_ids`` (all 0) are buffers, not weights: the
    defaults for callers that pass neither. Non-persistent, they stay out of the state_dict, so
    transformers' state_dict loads strictly.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        # padding_idx: the [PAD] row gets no gradient (and transformers' init zeroes it).
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)

        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        position_ids, token_type_ids = self.position_buffers(config)
        self.register_buffer("position_ids", position_ids, persistent=False)
        self.register_buffer("token_type_ids", token_type_ids, persistent=False)

    @staticmethod
    def position_buffers(config) -> tuple[torch.Tensor, torch.Tensor]:
        """The non-persistent buffers: positions 0, 1, ..., P - 1 and token types 0, each (1, P)."""
        position_ids = torch.arange(config.max_position_embeddings).unsqueeze(0)  # (1, max_position_embeddings)
        return position_ids, torch.zeros(position_ids.size(), dtype=torch.long)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_key_values_length: int = 0,
    ) -> torch.Tensor:
        """Embed every token.

        Args:
            input_ids: (B, T) token ids, or None when ``inputs_embeds`` is given.
            token_type_ids: (B, T) segment ids; None means segment 0 everywhere.
            position_ids: (B, T) or (1, T); None means past_key_values_length + 0, 1, ..., T - 1.
            inputs_embeds: (B, T, H) word vectors used instead of looking up ``input_ids``.
            past_key_values_length: the first default position (0 in an encoder).

        Returns:
            (B, T, H).
        """
        input_shape = input_ids.size() if input_ids is not None else inputs_embeds.size()[:-1]  # type: ignore[union-attr]
        batch_size, seq_length = input_shape

        if position_ids is None:
            position_ids = self.position_ids[:, past_key_values_length : seq_length + past_key_values_length]  # (1, T)

        if token_type_ids is None:
            # The buffer read at the same positions (all zeros), broadcast over the batch; reading it
            # rather than building zeros keeps the default inside the model when it is traced.
            buffered = self.token_type_ids.expand(position_ids.shape[0], -1)  # (1 or B, P)
            token_type_ids = torch.gather(buffered, dim=1, index=position_ids).expand(batch_size, seq_length)

        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, H)
        # Summed in this order: float addition is not associative, and transformers adds them so.
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)

        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)
