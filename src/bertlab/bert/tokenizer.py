"""BertTokenizer: text -> input_ids, token_type_ids and attention_mask, on the ``tokenizers`` library.

transformers' fast BERT tokenizer is a thin layer over a ``tokenizers.Tokenizer``: it rebuilds the
pipeline from the directory's files (WordPiece over the vocabulary, BERT's normaliser and
pre-tokeniser, a [CLS] ... [SEP] template), sets truncation and padding for each call, and turns the
encodings into lists or tensors. This class does the same with the same library and settings, so the
ids are the same; it covers what the course calls (``tokenizer(texts, padding=True,
return_tensors="pt")``, ``tokenize``, ``decode``, ``convert_ids_to_tokens``, the special tokens).
"""

from __future__ import annotations

import json
import os
from collections import UserDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tokenizers import AddedToken, Encoding, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
BERT_SPECIAL_DEFAULTS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}
VERY_LARGE_INTEGER = int(1e30)  # model_max_length when the files give none: no limit
LARGE_INTEGER = int(1e20)  # above this, model_max_length counts as no limit
PADDINGS = ("longest", "max_length", "do_not_pad")
TRUNCATIONS = ("longest_first", "only_first", "only_second", "do_not_truncate")


class BatchEncoding(UserDict):
    """The tokenizer's output: a dict of ``input_ids``, ``token_type_ids``, ``attention_mask``...

    Keys read as attributes too (``batch.input_ids``); ``model(**batch)`` passes them by name.
    ``encodings`` keeps the library's Encoding of each sequence (tokens, word ids, offsets).
    """

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        encodings: list[Encoding] | None = None,
        tensor_type: str | None = None,
    ) -> None:
        super().__init__(data)
        self._encodings = encodings
        self.convert_to_tensors(tensor_type)

    def __getattr__(self, item: str) -> Any:
        if item in ("data", "_encodings"):  # not set yet (while unpickling): no recursion into data
            raise AttributeError(item)
        try:
            return self.data[item]
        except KeyError:
            raise AttributeError(item) from None

    def __getitem__(self, item: str | int) -> Any:
        if isinstance(item, str):
            return self.data[item]
        if self._encodings is None:
            raise KeyError("Indexing with an integer needs the encodings, which this BatchEncoding does not hold")
        return self._encodings[item]  # the Encoding of sequence `item`

    @property
    def encodings(self) -> list[Encoding] | None:
        return self._encodings

    def tokens(self, batch_index: int = 0) -> list[str]:
        """The tokens of one sequence, special and padding tokens included."""
        return self._encoding(batch_index).tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """For each token of one sequence, the index of the word it came from (None for special tokens)."""
        return self._encoding(batch_index).word_ids

    def _encoding(self, batch_index: int) -> Encoding:
        if not self._encodings:
            raise ValueError("This BatchEncoding holds no encodings (it was not made by the tokenizer)")
        return self._encodings[batch_index]

    def convert_to_tensors(self, tensor_type: str | None = None) -> BatchEncoding:
        """Lists of ids -> torch tensors (``"pt"``) or numpy arrays (``"np"``); None leaves lists."""
        if tensor_type is None:
            return self
        if tensor_type not in ("pt", "np"):
            raise ValueError(f"return_tensors={tensor_type!r} is not supported; use 'pt' or 'np'")
        for key, value in self.data.items():
            if isinstance(value, (torch.Tensor, np.ndarray)):
                continue
            empty = _count(value) == 0  # no ids at all: still an integer tensor, not a float one
            try:
                if tensor_type == "pt":
                    self.data[key] = torch.tensor(value, dtype=torch.int64 if empty else None)
                else:
                    self.data[key] = np.asarray(value, dtype=np.int64 if empty else None)
            except ValueError as err:  # sequences of different lengths
                raise ValueError(
                    "Unable to create tensor, you should probably activate truncation and/or padding with "
                    "'padding=True' 'truncation=True' to have batched tensors with the same length."
                ) from err
        return self

    def to(self, device: str | torch.device) -> BatchEncoding:
        """Move the tensors to ``device``; returns self."""
        self.data = {k: v.to(device=device) if isinstance(v, torch.Tensor) else v for k, v in self.data.items()}
        return self


def _token_content(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class BertTokenizer:
    """BERT's WordPiece tokenizer, built from a model directory by ``BertTokenizer.from_pretrained(path)``."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    is_fast = True

    def __init__(self, vocab: dict[str, int], settings: dict[str, Any], added_tokens: Sequence[dict] = ()) -> None:
        """Build the pipeline as transformers' BertTokenizer builds it.

        Args:
            vocab: token -> id.
            settings: tokenizer_config.json's values (do_lower_case, the special tokens, model_max_length...).
            added_tokens: tokenizer.json's added tokens (dicts with content, id, special, normalized...).
        """
        self.name_or_path = str(settings.get("name_or_path", ""))
        self.do_lower_case = settings.get("do_lower_case", True)
        self.tokenize_chinese_chars = settings.get("tokenize_chinese_chars", True)
        self.strip_accents = settings.get("strip_accents")
        self.model_max_length = settings.get("model_max_length") or VERY_LARGE_INTEGER
        self.padding_side = settings.get("padding_side", "right")
        self.truncation_side = settings.get("truncation_side", "right")
        self.clean_up_tokenization_spaces = settings.get("clean_up_tokenization_spaces", False)
        self.pad_token_type_id = 0
        self._special = {
            name: _token_content(settings.get(name, BERT_SPECIAL_DEFAULTS.get(name))) for name in SPECIAL_TOKENS
        }

        unk = str(self._special["unk_token"])
        backend = Tokenizer(WordPiece(vocab, unk_token=unk))
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=self.tokenize_chinese_chars,
            strip_accents=self.strip_accents,
            lowercase=self.do_lower_case,
        )
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        self._tokenizer = backend

        # Added tokens (the special ones): matched whole in the text before normalising, never split.
        tokens = [
            AddedToken(
                t["content"],
                single_word=t.get("single_word", False),
                lstrip=t.get("lstrip", False),
                rstrip=t.get("rstrip", False),
                normalized=t.get("normalized", not t.get("special", False)),
                special=t.get("special", False),
            )
            for t in sorted(added_tokens, key=lambda t: t["id"])
        ]
        present = {t.content for t in tokens}
        tokens += [AddedToken(v, special=True) for v in self._special.values() if v is not None and v not in present]
        backend.add_tokens(tokens)
        backend.encode_special_tokens = False

        cls, sep = str(self._special["cls_token"]), str(self._special["sep_token"])
        cls_id, sep_id = self.cls_token_id, self.sep_token_id
        backend.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, cls_id if cls_id is not None else 2), (sep, sep_id if sep_id is not None else 3)],
        )

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike) -> BertTokenizer:
        """The tokenizer of a model directory: tokenizer.json (or vocab.txt) and tokenizer_config.json."""
        path = Path(model_dir)
        settings: dict[str, Any] = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the second file wins
            if (path / name).is_file():
                settings.update(json.loads((path / name).read_text(encoding="utf-8")))
        settings["name_or_path"] = str(model_dir)
        if (path / "tokenizer.json").is_file():
            data = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
            vocab = data["model"]["vocab"]
            if isinstance(vocab, list):
                vocab = {token[0] if isinstance(token, list) else token: i for i, token in enumerate(vocab)}
            return cls(vocab, settings, data.get("added_tokens", []))
        if (path / "vocab.txt").is_file():
            lines = (path / "vocab.txt").read_text(encoding="utf-8").split("\n")
            if lines and lines[-1] == "":
                lines.pop()  # the newline ending the last line
            return cls({token: i for i, token in enumerate(lines)}, settings)
        raise FileNotFoundError(f"{path} has neither tokenizer.json nor vocab.txt")

    # -- encoding -------------------------------------------------------------------------------------

    def __call__(
        self,
        text: str | list[str] | tuple[str, ...],
        text_pair: str | list[str] | tuple[str, ...] | None = None,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Tokenize one text (lists of ids) or a batch (lists of lists, or (B, T) tensors).

        ``padding=True`` pads to the longest sequence of the batch; ``"max_length"`` to ``max_length``
        (default model_max_length). ``truncation=True`` cuts to ``max_length`` (the same default). As in
        transformers, a sequence longer than the model accepts is kept whole unless truncation is asked.
        """
        if not _is_text(text) or (text_pair is not None and not _is_text(text_pair)):
            raise ValueError("text input must be of type `str` (single example) or `list[str]` (batch)")
        padding_strategy, truncation_strategy, max_length = self._strategies(padding, truncation, max_length)
        batched = isinstance(text, (list, tuple))
        inputs: list[Any]
        if batched:
            if isinstance(text_pair, str):
                raise TypeError("when tokenizing a batch, `text_pair` must be a list or tuple as long as `text`")
            if text_pair is not None and len(text) != len(text_pair):
                raise ValueError(f"batch length of `text`: {len(text)} does not match `text_pair`: {len(text_pair)}")
            inputs = list(zip(text, text_pair, strict=True)) if text_pair is not None else list(text)
        else:
            inputs = [(text, text_pair)] if text_pair else [text]

        self._set_truncation_and_padding(
            padding_strategy, truncation_strategy, max_length, stride, pad_to_multiple_of, padding_side
        )
        encodings = self._tokenizer.encode_batch(inputs, add_special_tokens=add_special_tokens)

        if return_token_type_ids is None:
            return_token_type_ids = "token_type_ids" in self.model_input_names
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        data: dict[str, list] = {"input_ids": [e.ids for e in encodings]}
        if return_token_type_ids:
            data["token_type_ids"] = [e.type_ids for e in encodings]
        if return_attention_mask:
            data["attention_mask"] = [e.attention_mask for e in encodings]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = [e.special_tokens_mask for e in encodings]
        if return_offsets_mapping:
            data["offset_mapping"] = [e.offsets for e in encodings]
        if return_length:
            data["length"] = [len(e.ids) for e in encodings]

        if not batched and return_tensors is None:
            return BatchEncoding({key: value[0] for key, value in data.items()}, encodings)  # one text: no batch axis
        return BatchEncoding(data, encodings, tensor_type=return_tensors)

    def _strategies(self, padding: bool | str, truncation: bool | str | None, max_length: int | None):
        """padding, truncation and max_length as transformers resolves them (strategy names, defaults)."""
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"  # max_length alone asks for truncation
        padding_strategy = "longest" if padding is True else "do_not_pad" if padding is False else padding
        truncation_strategy = (
            "longest_first" if truncation is True else "do_not_truncate" if truncation in (None, False) else truncation
        )
        if padding_strategy not in PADDINGS:
            raise ValueError(f"padding={padding!r}: use True, False or one of {PADDINGS}")
        if truncation_strategy not in TRUNCATIONS:
            raise ValueError(f"truncation={truncation!r}: use True, False or one of {TRUNCATIONS}")
        if max_length is None:
            if padding_strategy == "max_length":
                if self.model_max_length > LARGE_INTEGER:
                    padding_strategy = "do_not_pad"
                else:
                    max_length = self.model_max_length
            if truncation_strategy != "do_not_truncate":
                if self.model_max_length > LARGE_INTEGER:
                    truncation_strategy = "do_not_truncate"
                else:
                    max_length = self.model_max_length
        if padding_strategy != "do_not_pad" and (self.pad_token is None or (self.pad_token_id or 0) < 0):
            raise ValueError("Asking to pad but the tokenizer does not have a padding token.")
        return padding_strategy, truncation_strategy, max_length

    def _set_truncation_and_padding(
        self,
        padding_strategy: str,
        truncation_strategy: str,
        max_length: int | None,
        stride: int,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
    ) -> None:
        """Set the library tokenizer's truncation and padding for this call (it keeps them between calls)."""
        if truncation_strategy == "do_not_truncate":
            self._tokenizer.no_truncation()
        else:
            # _strategies gives a max_length whenever it leaves truncation on
            self._tokenizer.enable_truncation(
                cast(int, max_length), stride=stride, strategy=truncation_strategy, direction=self.truncation_side
            )
        if padding_strategy == "do_not_pad":
            self._tokenizer.no_padding()
        else:
            self._tokenizer.enable_padding(
                length=max_length if padding_strategy == "max_length" else None,
                direction=padding_side if padding_side is not None else self.padding_side,
                pad_id=self.pad_token_id,
                pad_token=self.pad_token,
                pad_type_id=self.pad_token_type_id,
                pad_to_multiple_of=pad_to_multiple_of,
            )

    def encode(self, text: str, text_pair: str | None = None, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        """The ids of one text (a list; a (1, T) tensor with return_tensors="pt")."""
        return self(text, text_pair, add_special_tokens=add_special_tokens, **kwargs)["input_ids"]

    def tokenize(
        self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs: Any
    ) -> list[str]:
        """The WordPiece tokens of ``text``, without [CLS] and [SEP] unless asked."""
        return self(text, pair, add_special_tokens=add_special_tokens, **kwargs).tokens()

    # -- ids, tokens and text -------------------------------------------------------------------------

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> str | list[str | None] | None:
        """One id -> its token; a sequence of ids (list, 1-D tensor) -> a list of tokens (None: no such id)."""
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        """One token -> its id; a list -> a list. Unknown tokens get [UNK]'s id."""
        if isinstance(tokens, str):
            return self._token_to_id(tokens)
        return [self._token_to_id(token) for token in tokens]

    def _token_to_id(self, token: str) -> int:
        index = self._tokenizer.token_to_id(token)
        return index if index is not None else self.unk_token_id  # type: ignore[return-value]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self._tokenizer.decoder.decode(tokens)

    def decode(
        self, token_ids: Any, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> str:
        """Ids (int, list, tensor or array) -> text: WordPiece pieces joined, ``##`` continuations glued."""
        if isinstance(token_ids, (torch.Tensor, np.ndarray)):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if isinstance(token_ids, (dict, UserDict)):
            token_ids = token_ids["input_ids"]
        text = self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        return _clean_up_tokenization(text) if clean else text

    def batch_decode(self, sequences: Any, **kwargs: Any) -> list[str]:
        return [self.decode(sequence, **kwargs) for sequence in sequences]

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    @property
    def vocab(self) -> dict[str, int]:
        return self.get_vocab()

    @property
    def vocab_size(self) -> int:
        """The size of the base vocabulary (added tokens not counted)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The ``tokenizers.Tokenizer`` doing the work."""
        return self._tokenizer

    # -- special tokens -------------------------------------------------------------------------------

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {name: value for name, value in self._special.items() if value is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        """Every special token once, in the order bos, eos, unk, sep, pad, cls, mask."""
        return list(dict.fromkeys(self.special_tokens_map.values()))

    @property
    def all_special_ids(self) -> list[int]:
        return [self._token_to_id(token) for token in self.all_special_tokens]

    def _special_id(self, name: str) -> int | None:
        token = self._special[name]
        return None if token is None else self._token_to_id(token)

    bos_token = property(lambda self: self._special["bos_token"])
    eos_token = property(lambda self: self._special["eos_token"])
    unk_token = property(lambda self: self._special["unk_token"])
    sep_token = property(lambda self: self._special["sep_token"])
    pad_token = property(lambda self: self._special["pad_token"])
    cls_token = property(lambda self: self._special["cls_token"])
    mask_token = property(lambda self: self._special["mask_token"])
    bos_token_id = property(lambda self: self._special_id("bos_token"))
    eos_token_id = property(lambda self: self._special_id("eos_token"))
    unk_token_id = property(lambda self: self._special_id("unk_token"))
    sep_token_id = property(lambda self: self._special_id("sep_token"))
    pad_token_id = property(lambda self: self._special_id("pad_token"))
    cls_token_id = property(lambda self: self._special_id("cls_token"))
    mask_token_id = property(lambda self: self._special_id("mask_token"))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size}, "
            f"model_max_length={self.model_max_length}, padding_side={self.padding_side!r}, "
            f"special_tokens={self.special_tokens_map})"
        )


def _count(value: Any) -> int:
    """How many scalars a nested list holds."""
    return sum(_count(item) for item in value) if isinstance(value, (list, tuple)) else 1


def _is_text(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


def _clean_up_tokenization(text: str) -> str:
    """Glue punctuation and English contractions back to the word before (decode's optional clean-up)."""
    for spaced, glued in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(spaced, glued)
    return text
