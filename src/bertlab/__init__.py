"""bertlab: build Hugging Face's BertLayer piece by piece, graded against a pretrained BERT."""

__version__ = "0.1.0"
