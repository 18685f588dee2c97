"""A small fixed corpus of English sentences, written for this course.

Lengths differ on purpose: batched together they need padding, so every check also exercises
the attention mask. The sentences cover a few topics so that semantic search has something to
rank (lesson 7).
"""

from __future__ import annotations

SENTENCES: tuple[str, ...] = (
    "this is a test sentence",
    "The cat slept on the warm windowsill all afternoon.",
    "A kitten was napping in the sun by the window.",
    "Stock markets fell sharply after the central bank raised interest rates.",
    "Investors sold shares when borrowing became more expensive.",
    "She baked bread.",
    "The recipe calls for flour, water, salt and a little yeast, then a long slow rise overnight.",
    "Transformers read every word of a sentence at once and let each word look at the others.",
    "How far is the train station from here?",
    "Heavy rain flooded the streets of the old town on Tuesday.",
)


def batch(tokenizer, sentences=SENTENCES):
    """Tokenize ``sentences`` into one padded batch of PyTorch tensors.

    Returns:
        A ``BatchEncoding`` with ``input_ids``, ``token_type_ids`` and ``attention_mask``,
        each of shape (B, T), T being the longest sentence in tokens.
    """
    return tokenizer(list(sentences), padding=True, return_tensors="pt")
