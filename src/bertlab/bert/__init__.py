"""The course's own BERT: transformers' BertModel, module by module, in plain torch.

When a notebook is graded, the learner's code runs in a process that cannot read transformers'
model code. The pretrained parts it is handed (BertSelfAttention, BertLayer, a whole BertModel...)
and the model and tokenizer it loads come from this package instead: the same class and attribute
names, the same forward signatures and return types, the same operations in the same order, so
outputs, dropout draws and gradients are bit-equal to transformers' eager path under the same
weights (tests/test_course_bert.py compares every class with transformers' own). Only the encoder
is implemented: a config asking for a decoder, cross-attention or a cache is refused.
"""

from bertlab.bert.activations import ACT2FN
from bertlab.bert.attention_mask import bidirectional_mask
from bertlab.bert.attention_output import BertAttention, BertSelfOutput
from bertlab.bert.bert_model import BertEncoder, BertLayer, BertModel, BertPooler
from bertlab.bert.config import BertConfig
from bertlab.bert.embeddings import BertEmbeddings
from bertlab.bert.feed_forward import BertIntermediate, BertOutput
from bertlab.bert.load import load_config, load_model, load_tokenizer
from bertlab.bert.outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    BaseModelOutputWithPoolingAndCrossAttentions,
    ModelOutput,
)
from bertlab.bert.self_attention import BertSelfAttention, eager_attention_forward
from bertlab.bert.tokenizer import BatchEncoding, BertTokenizer
from bertlab.given_parts import guard as _guard

from bertlab.bert import (  # isort: skip  (the files that compute, guarded once all are loaded)
    activations as _activations,
    attention_mask as _attention_mask,
    attention_output as _attention_output,
    bert_model as _bert_model,
    embeddings as _embeddings,
    feed_forward as _feed_forward,
    self_attention as _self_attention,
)

# While a check calls a learner's code, these run only as the grader's parts, on any thread.
_guard([_activations, _attention_mask, _attention_output, _bert_model, _embeddings, _feed_forward, _self_attention])

__all__ = [
    "ACT2FN",
    "BaseModelOutputWithPastAndCrossAttentions",
    "BaseModelOutputWithPoolingAndCrossAttentions",
    "BatchEncoding",
    "BertAttention",
    "BertConfig",
    "BertEmbeddings",
    "BertEncoder",
    "BertIntermediate",
    "BertLayer",
    "BertModel",
    "BertOutput",
    "BertPooler",
    "BertSelfAttention",
    "BertSelfOutput",
    "BertTokenizer",
    "ModelOutput",
    "bidirectional_mask",
    "eager_attention_forward",
    "load_config",
    "load_model",
    "load_tokenizer",
]
