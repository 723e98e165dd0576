"""Tokenizers: bytes, a byte-level BPE trained on the corpus, or a saved ``tokenizer.json``.

Each one reports how many UTF-8 bytes every token id stands for (``token_bytes``), so the
bytes behind any run of evaluation tokens is ``token_bytes[ids].sum()`` whatever the
tokenizer: val_bpb compares across tokenizers. A BPE is trained once per text and vocabulary
size and cached as JSON beside the tokenized corpus.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer as HFModel
from tokenizers import decoders, models, pre_tokenizers, trainers

from recipelab.fsutil import atomic_write_bytes
from recipelab.recipe import BYTE_VOCAB
from recipelab.trainer.spec import DataError

TokenArray = npt.NDArray[np.integer[Any]]
BPE_SAMPLE_BYTES = 4 << 20
ENCODE_CHUNK_CHARS = 1 << 16
# A newline between two non-space characters: GPT-2's pre-tokenizer always makes such a
# newline a pre-token of its own, so text split right after it encodes to the same ids.
_SAFE_SPLIT = re.compile(r"(?<=\S\n)(?=\S)")


class Tokenizer(ABC):
    """Text to token ids, plus the UTF-8 byte length behind every id (for val_bpb).

    ``vocab_size`` is the number of ids the model must cover; ``token_bytes`` has one entry
    per id, so ``token_bytes[ids].sum()`` is the byte count a run of ids encodes.
    """

    name: str
    vocab_size: int
    token_bytes: npt.NDArray[np.int64]

    @abstractmethod
    def encode(self, text: str) -> npt.NDArray[np.int32]:
        """The ids of ``text``, with no special tokens added."""

    @abstractmethod
    def decode(self, ids: TokenArray) -> str:
        """The text behind ``ids`` (special tokens dropped), for reading samples and tests."""


class ByteTokenizer(Tokenizer):
    """One token per UTF-8 byte: nothing to train, nothing to cache, any text encodes."""

    def __init__(self) -> None:
        self.name = "byte"
        self.vocab_size = BYTE_VOCAB
        self.token_bytes = np.ones(BYTE_VOCAB, dtype=np.int64)

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids: TokenArray) -> str:
        return np.asarray(ids, dtype=np.uint8).tobytes().decode("utf-8", errors="replace")


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers`` tokenizer (trained here, or the one beside ``.bin`` files)."""

    def __init__(self, model: HFModel, name: str, vocab_size: int) -> None:
        self._model = model
        self._chunked = _splits_like_gpt2(model)
        self.name = name
        self.vocab_size = vocab_size
        self.token_bytes = _token_bytes(model, vocab_size)

    def encode(self, text: str) -> npt.NDArray[np.int32]:
        """Encode, in parallel chunks when that provably gives the ids of one encode call."""
        pieces = list(_safe_chunks(text)) if self._chunked else [text]
        encodings = self._model.encode_batch(pieces, add_special_tokens=False)
        return np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int32)

    def decode(self, ids: TokenArray) -> str:
        return self._model.decode(np.asarray(ids).tolist(), skip_special_tokens=True)

    def to_json(self) -> str:
        """The tokenizer in HF ``tokenizer.json`` format, so a cache can restore it exactly."""
        return self._model.to_str()


def byte_tokenizer() -> Tokenizer:
    return ByteTokenizer()


def bpe_tokenizer(train_text: str, vocab_size: int, cache_dir: Path) -> Tokenizer:
    """A byte-level BPE trained on (at most the first 4 MiB of) ``train_text``, cached on disk.

    The cache key is the training sample and ``vocab_size``, so a second call with the same
    text loads the JSON instead of training. The learned vocabulary may be smaller than
    ``vocab_size`` on a small text; ``vocab_size`` is still what is reported, and the ids
    above the learned size are simply never produced.
    """
    if vocab_size < BYTE_VOCAB:
        raise DataError(
            f"a byte-level BPE needs vocab_size >= {BYTE_VOCAB} (one id per byte before any "
            f"merge), got {vocab_size}: raise shape.vocab_size or use the byte tokenizer"
        )
    # a prefix cut back to a whole character (the text is valid UTF-8: only its cut tail is not)
    sample = train_text.encode("utf-8")[:BPE_SAMPLE_BYTES].decode("utf-8", "ignore").encode("utf-8")
    digest = hashlib.sha256(sample + vocab_size.to_bytes(8, "little")).hexdigest()[:16]
    path = cache_dir / f"bpe-{vocab_size}-{digest}.json"
    if not path.is_file():
        model = _train_bpe(sample.decode("utf-8"), vocab_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, model.to_str().encode("utf-8"))
    return load_tokenizer_json(path, vocab_size, name=f"bpe-{vocab_size}")


def _train_bpe(text: str, vocab_size: int) -> HFModel:
    """GPT-2-style BPE: every byte in the initial alphabet, so no text is ever unknown."""
    model = HFModel(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    model.train_from_iterator(_safe_chunks(text), trainer=trainer)
    return model


def load_tokenizer_json(path: Path, vocab_size: int, name: str | None = None) -> HFTokenizer:
    try:
        model = HFModel.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for any bad file
        raise DataError(
            f"{path} is not a readable tokenizer.json ({exc}): save the tokenizer with "
            "tokenizers' Tokenizer.save() or transformers' save_pretrained()"
        ) from exc
    label = name or f"{type(model.model).__name__.lower()}-{model.get_vocab_size()}"
    return HFTokenizer(model, label, vocab_size)


def tokenizer_from_file(path: Path) -> HFTokenizer:
    """The tokenizer saved in a ``tokenizer.json`` (GPT-2's published one, or any
    ``tokenizers`` file), covering every id it has, added tokens included."""
    if not path.is_file():
        raise DataError(
            f"tokenizer file {path} does not exist: give byte, bpe or the path of a "
            "tokenizer.json"
        )
    try:
        model = HFModel.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for any bad file
        raise DataError(
            f"{path} is not a readable tokenizer.json ({str(exc).splitlines()[0]}): give the "
            "tokenizer.json that tokenizers' Tokenizer.save() or transformers' "
            "save_pretrained() writes"
        ) from exc
    return load_tokenizer_json(path, model.get_vocab_size(with_added_tokens=True))


def byte_tokenizer_json() -> str:
    """The byte tokenizer as a ``tokenizer.json``: a byte-level BPE without merges whose id
    for each byte is the byte's value, so the ids :class:`ByteTokenizer` makes decode
    through it and a ``.bin`` directory of byte ids carries its byte lengths like any other."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(BYTE_VOCAB) if b not in printable]
    chars = {**{b: chr(b) for b in printable},
             **{b: chr(BYTE_VOCAB + i) for i, b in enumerate(shifted)}}  # GPT-2's byte map
    model = HFModel(models.BPE(vocab={chars[b]: b for b in range(BYTE_VOCAB)}, merges=[]))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    return model.to_str()


def text_chunks(tokenizer: Tokenizer, text: str, size: int) -> list[str]:
    """``text`` in pieces of about ``size`` characters whose ids, encoded one by one and
    concatenated, are exactly ``tokenizer.encode(text)``: anywhere for bytes, where GPT-2's
    pre-tokenizer splits anyway for a GPT-2-style BPE, and not at all for other tokenizers."""
    if isinstance(tokenizer, ByteTokenizer):
        return [text[i:i + size] for i in range(0, len(text), size)]
    if isinstance(tokenizer, HFTokenizer) and tokenizer._chunked:
        return list(_safe_chunks(text, size))
    return [text] if text else []


def _splits_like_gpt2(model: HFModel) -> bool:
    """Whether pre-tokenization is GPT-2's regex on the raw text (what chunking relies on)."""
    pre = model.pre_tokenizer
    return (
        model.normalizer is None
        and isinstance(pre, pre_tokenizers.ByteLevel)
        and pre.use_regex
        and not pre.add_prefix_space
    )


def _safe_chunks(text: str, size: int = ENCODE_CHUNK_CHARS) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters, split only where GPT-2 splits anyway.

    Encoding the pieces with ``encode_batch`` uses every core yet yields exactly the ids of a
    single ``encode`` call (2.7x faster on 8 MiB of Python source with 2 cores).
    """
    start = 0
    while len(text) - start > size:
        match = _SAFE_SPLIT.search(text, start + size)
        if match is None:
            break
        yield text[start : match.start()]
        start = match.start()
    if start < len(text):
        yield text[start:]


def _token_bytes(model: HFModel, vocab_size: int) -> npt.NDArray[np.int64]:
    """UTF-8 byte length of each id; 0 for special tokens and for ids the vocab lacks.

    In a ByteLevel vocabulary each character of a token's string stands for one byte, so the
    length is exact; otherwise the decoded text of the lone id is measured (best effort:
    some decoders drop a leading space from a lone token).
    """
    lengths = np.zeros(vocab_size, dtype=np.int64)
    added = model.get_added_tokens_decoder()
    byte_level = isinstance(model.decoder, decoders.ByteLevel)
    for token, index in model.get_vocab(with_added_tokens=True).items():
        if index >= vocab_size:
            continue
        if index in added:
            lengths[index] = 0 if added[index].special else len(token.encode("utf-8"))
        elif byte_level:
            lengths[index] = len(token)
        else:
            lengths[index] = len(model.decode([index]).encode("utf-8"))
    return lengths
