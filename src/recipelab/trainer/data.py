"""Training data: corpora, tokenizers, a deterministic split and a fixed evaluation slice.

Every trial of a campaign must be scored on the same held-out bytes, or val_bpb would not
compare across trials. So the split is a pure function of the corpus (the last
``val_fraction`` of the text, cut at a newline), the evaluation slice is ``eval_bytes`` bytes
drawn in evenly spaced pieces across the whole validation text (:func:`spread_slice`: the
first bytes alone would be a few neighbouring files, whose windows are not independent), and
each tokenizer reports how many UTF-8
bytes every token id stands for (``token_bytes``), so the bytes behind any run of eval
tokens is ``token_bytes[ids].sum()`` whatever the tokenizer.

Each trial is a fresh process, and tokenizing a few MiB of text takes seconds, so the
tokenized arrays are cached as ``.npy`` files keyed by a cheap fingerprint (file paths,
sizes and mtimes, or the Python version for the built-in corpora) and memory-mapped on the
next load. A corpus capped by ``max_bytes`` (``--corpus-max-bytes``; a campaign sets it to
what its longest run reads) is streamed: files in sorted order, Parquet in small batches,
stopping once the cap is reached, so a FineWeb-Edu sample of tens of GB costs what the
campaign uses, not its size. :func:`sample_batch` draws batches from ``(seed, step)`` alone, so a resumed run
sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import sysconfig
import tempfile
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tokenizers import Tokenizer as HFModel
from tokenizers import decoders, models, pre_tokenizers, trainers

from recipelab import environment
from recipelab.errors import RecipelabError
from recipelab.locking import FileLock
from recipelab.recipe import BYTE_VOCAB
from recipelab.trainer.spec import CorpusSpec

__all__ = [
    "DataError",
    "Dataset",
    "Tokenizer",
    "bin_dtype",
    "bpe_tokenizer",
    "byte_tokenizer",
    "byte_tokenizer_json",
    "load_dataset",
    "read_corpus_text",
    "sample_batch",
    "text_chunks",
    "tokenizer_cache_dir",
    "tokenizer_from_file",
]

TokenArray = npt.NDArray[np.integer[Any]]
SourceKind = Literal["python-docs", "python-source", "text", "parquet", "bin"]

BUILTIN_CORPORA: tuple[SourceKind, ...] = ("python-docs", "python-source")
TOKENIZERS = ("byte", "bpe")
TEXT_SUFFIXES = (".txt", ".md")
SEPARATOR = b"\n\n"
BPE_SAMPLE_BYTES = 4 << 20
PYTHON_SOURCE_MAX_BYTES = 8 << 20
SKIPPED_STDLIB_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
ENCODE_CHUNK_CHARS = 1 << 16
PARQUET_BATCH_ROWS = 1024
"""Rows per record batch: FineWeb-Edu's rows are a few KiB, so a batch is a few MiB, and a
capped read stops within a few MiB of its cap."""
PARQUET_BUFFER_BYTES = 1 << 20
"""Read column chunks through a 1 MiB buffer instead of whole (a row group's text column can
be hundreds of MiB), so reading the first rows of a huge shard costs little memory."""
CACHE_FORMAT = 3  # 2: the text's evaluation slice spread; 3: a .bin's too, and whole_text
BIN_DTYPES = {"uint16": np.uint16, "uint32": np.uint32}
"""Token id types a ``.bin`` directory may hold: nanoGPT's uint16, and uint32 for vocabularies
above 65,536, which its ``meta.json`` then names as ``{"dtype": "uint32"}``."""
BIN_META = "meta.json"

# A newline between two non-space characters: GPT-2's pre-tokenizer always makes such a
# newline a pre-token of its own, so text split right after it encodes to the same ids.
_SAFE_SPLIT = re.compile(r"(?<=\S\n)(?=\S)")


class DataError(RecipelabError, ValueError):
    """Bad training data. The message names the problem AND the fix (what the user should do)."""


# --- tokenizers ----------------------------------------------------------------------------


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
    sample = _utf8_prefix(train_text.encode("utf-8"), BPE_SAMPLE_BYTES)
    digest = hashlib.sha256(sample + vocab_size.to_bytes(8, "little")).hexdigest()[:16]
    path = cache_dir / f"bpe-{vocab_size}-{digest}.json"
    if not path.is_file():
        model = _train_bpe(sample.decode("utf-8"), vocab_size)
        _atomic_write(path, lambda f: f.write(model.to_str().encode("utf-8")))
    return _load_tokenizer_json(path, vocab_size, name=f"bpe-{vocab_size}")


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


def _load_tokenizer_json(path: Path, vocab_size: int, name: str | None = None) -> HFTokenizer:
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
    return _load_tokenizer_json(path, model.get_vocab_size(with_added_tokens=True))


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


# --- the dataset ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """Tokenized training data and the fixed evaluation slice of one corpus."""

    train: TokenArray
    eval_tokens: npt.NDArray[np.int32]
    eval_bytes: int
    tokenizer: Tokenizer
    fingerprint: str
    description: str
    eval_whole: bool = False  # the slice is the whole validation text (it was no longer)


@dataclass(frozen=True)
class _Source:
    """A resolved corpus: what kind it is and which files it reads (none for built-ins)."""

    kind: SourceKind
    label: str
    files: tuple[Path, ...]


def load_dataset(corpus: CorpusSpec, *, tokenizer: str, vocab_size: int, eval_bytes: int,
                 min_train_tokens: int) -> Dataset:
    """Load ``corpus`` tokenized, from the cache when its sources are unchanged.

    For a ``train.bin``/``val.bin`` directory the ids are already made, so ``tokenizer`` is
    not used: the ``tokenizer.json`` beside them supplies the byte lengths.
    """
    if tokenizer not in TOKENIZERS:
        raise DataError(
            f"unknown tokenizer {tokenizer!r}: set recipe.tokenizer to one of "
            f"{', '.join(TOKENIZERS)}"
        )
    source = _resolve(corpus)
    fingerprint = _fingerprint(source, corpus, tokenizer, vocab_size, eval_bytes)
    root = _cache_root(corpus)
    entry = root / "datasets" / fingerprint
    dataset = _load_cached(entry, source, fingerprint, vocab_size)
    if dataset is None:
        dataset = _build_once(entry, source, corpus, tokenizer, vocab_size, eval_bytes,
                              fingerprint)
    if len(dataset.train) < min_train_tokens:
        raise DataError(
            f"{dataset.description} has {len(dataset.train):,} training tokens but one batch needs "
            f"{min_train_tokens:,}: use a smaller batch_size or seq_len, or a bigger corpus "
            "(or a larger corpus.max_bytes if it is capped)"
        )
    return dataset


def _build_once(entry: Path, source: _Source, corpus: CorpusSpec, tokenizer: str,
                vocab_size: int, eval_bytes: int, fingerprint: str) -> Dataset:
    """Tokenize into the cache entry, one process at a time: the others (parallel trials,
    the ranks of a long run on one node) wait for the lock, then read what it stored."""
    with ExitStack() as held:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            held.enter_context(FileLock(entry.parent / f".{fingerprint}.lock",
                                        f"pid {os.getpid()} tokenizing", wait=True))
        except OSError:
            pass  # an unwritable cache: every process builds (and keeps) its own copy
        cached = _load_cached(entry, source, fingerprint, vocab_size)
        if cached is not None:
            return cached
        built = _build(source, corpus, tokenizer, vocab_size, eval_bytes,
                       tokenizer_cache_dir(corpus))
        try:
            _store(entry, source, built)
        except OSError as error:  # a full disk or an unwritable cache costs time, not the trial
            warnings.warn(f"tokenized corpus not cached in {entry} ({error}): the next trial "
                          "tokenizes it again", RuntimeWarning, stacklevel=2)
            return built
        stored = _load_cached(entry, source, fingerprint, vocab_size)
        assert stored is not None, "a freshly stored cache entry is complete"
        return stored


def read_corpus_text(corpus: CorpusSpec) -> tuple[str, bytes, int]:
    """The text of ``corpus`` as the trainer reads it (pieces joined by a blank line, capped
    at ``max_bytes``), a label for it, and where its validation part starts."""
    source = _resolve(corpus)
    if source.kind == "bin":
        raise DataError(
            f"{source.label} holds train.bin and val.bin, already tokenized: give the text "
            "corpus they were made from"
        )
    data = _read_corpus(source, corpus)
    return source.label, data, _split_point(data, corpus.val_fraction)


def sample_batch(train: TokenArray, batch_size: int, seq_len: int, seed: int,
                 step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``train``: inputs ``x`` and next-token targets ``y``.

    Offsets come from a generator seeded by ``(seed, step)`` alone, never from earlier calls,
    so a run resumed at step k sees the batches an uninterrupted run sees. One ``randint``
    and one vectorised gather (which also reads a uint16 memmap) keep it cheap per step.
    """
    windows = len(train) - seq_len
    if windows < 1:
        raise DataError(
            f"{len(train):,} training tokens cannot fill one sequence of seq_len {seq_len} plus "
            "its next-token target: use a smaller seq_len or a bigger corpus"
        )
    generator = torch.Generator().manual_seed(_batch_seed(seed, step))
    starts = torch.randint(windows, (batch_size,), generator=generator).numpy()
    rows = train[starts[:, None] + np.arange(seq_len + 1)]  # (B, T+1)
    tokens = torch.from_numpy(rows.astype(np.int64))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _batch_seed(seed: int, step: int) -> int:
    """Hash ``(seed, step)``: torch's CPU generator keeps only 32 bits of a seed, so packing
    the pair into one integer would make different seeds collide."""
    digest = hashlib.blake2b(f"{seed}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


# --- resolving a corpus (cheap: no file is read) --------------------------------------------


def _resolve(corpus: CorpusSpec) -> _Source:
    for builtin in BUILTIN_CORPORA:
        if corpus.source == builtin:
            return _Source(builtin, builtin, ())
    path = Path(corpus.source).expanduser()
    if not path.exists():
        raise DataError(
            f"corpus path {path} does not exist: fix corpus.source, or use a built-in corpus "
            f"({', '.join(BUILTIN_CORPORA)})"
        )
    if path.is_file():
        kind: SourceKind = "parquet" if path.suffix.lower() == ".parquet" else "text"
        return _Source(kind, str(path), (path,))
    return _resolve_directory(path)


def _resolve_directory(path: Path) -> _Source:
    """nanoGPT ``.bin`` files win, then Parquet shards, then ``.txt``/``.md`` files."""
    bins = (path / "train.bin", path / "val.bin")
    present = [b.name for b in bins if b.is_file()]
    if present:
        return _bin_source(path, bins, present)
    shards = tuple(sorted(path.rglob("*.parquet")))
    if shards:
        return _Source("parquet", str(path), shards)
    texts = tuple(sorted(p for p in path.rglob("*")
                         if p.suffix.lower() in TEXT_SUFFIXES and p.is_file()))
    if texts:
        return _Source("text", str(path), texts)
    raise DataError(
        f"{path} holds no .txt, .md, .parquet or train.bin/val.bin files: put the corpus text "
        "there, or point corpus.source at a file"
    )


def _bin_source(path: Path, bins: tuple[Path, Path], present: list[str]) -> _Source:
    missing = [b.name for b in bins if b.name not in present]
    if missing:
        raise DataError(
            f"{path} holds {present[0]} but not {missing[0]}: a pre-tokenized corpus needs both "
            "train.bin and val.bin"
        )
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise DataError(
            f"{path} has train.bin and val.bin but no tokenizer.json, so the bytes behind each "
            "token (needed for val_bpb) are unknown: put the tokenizer.json used to make the "
            ".bin files beside them"
        )
    return _Source("bin", str(path), (*bins, tokenizer))


def _fingerprint(source: _Source, corpus: CorpusSpec, tokenizer: str, vocab_size: int,
                 eval_bytes: int) -> str:
    """Hash what the data depends on, using file stamps rather than contents so it is cheap."""
    origin: object = (
        sys.version if source.kind in BUILTIN_CORPORA
        else [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in source.files]
    )
    key = {
        "format": CACHE_FORMAT,
        "kind": source.kind,
        "origin": origin,
        "text_column": corpus.text_column if source.kind == "parquet" else None,
        "max_bytes": _max_bytes(source, corpus),
        "val_fraction": corpus.val_fraction,
        "tokenizer": _tokenizer_key(source, tokenizer, vocab_size),
        "eval_bytes": eval_bytes,
    }
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _tokenizer_key(source: _Source, tokenizer: str, vocab_size: int) -> str:
    if source.kind == "bin":
        return f"bin-{vocab_size}"
    return "byte" if tokenizer == "byte" else f"bpe-{vocab_size}"


def _max_bytes(source: _Source, corpus: CorpusSpec) -> int | None:
    if corpus.max_bytes is None and source.kind == "python-source":
        return PYTHON_SOURCE_MAX_BYTES
    return corpus.max_bytes


def _cache_root(corpus: CorpusSpec) -> Path:
    return Path(corpus.cache_dir).expanduser() if corpus.cache_dir else environment.cache_dir()


def tokenizer_cache_dir(corpus: CorpusSpec) -> Path:
    """Where BPE tokenizers trained on ``corpus`` are cached (shared with the trainer's)."""
    return _cache_root(corpus) / "tokenizers"


# --- building a dataset (reads and tokenizes; only on a cache miss) -------------------------


def _build(source: _Source, corpus: CorpusSpec, tokenizer: str, vocab_size: int,
           eval_bytes: int, tokenizer_cache: Path) -> Dataset:
    """The dataset straight from its source; the caller caches it (fingerprint left blank)."""
    if source.kind == "bin":
        return _build_bin(source, vocab_size, eval_bytes)
    data = _read_corpus(source, corpus)
    cut = _split_point(data, corpus.val_fraction)
    validation = data[cut:]
    train_text = data[:cut].decode("utf-8")
    eval_text = spread_slice(validation, eval_bytes)
    tok = (byte_tokenizer() if tokenizer == "byte"
           else bpe_tokenizer(train_text, vocab_size, tokenizer_cache))
    description = (f"{source.label} ({len(data):,} bytes; {cut:,} train / "
                   f"{len(validation):,} val)")
    return Dataset(tok.encode(train_text), tok.encode(eval_text.decode("utf-8")),
                   len(eval_text), tok, "", description,
                   eval_whole=len(validation) <= eval_bytes)


def _build_bin(source: _Source, vocab_size: int, eval_bytes: int) -> Dataset:
    train_path, val_path, tokenizer_path = source.files
    train, val = _bin_tokens(train_path), _bin_tokens(val_path)
    for path, tokens in ((train_path, train), (val_path, val)):
        _check_ids(path, tokens, vocab_size)
    tok = _load_tokenizer_json(tokenizer_path, vocab_size)
    eval_tokens, nbytes, whole = spread_tokens(val, tok.token_bytes, eval_bytes)
    description = (f"{source.label} ({len(train):,} train / {len(val):,} val tokens, "
                   f"{tok.name})")
    return Dataset(train, eval_tokens, nbytes, tok, "", description, eval_whole=whole)


def bin_dtype(directory: Path) -> str:
    """The id type of the ``.bin`` files in ``directory``: ``meta.json``'s ``dtype`` when it
    names one (``recipelab tokenize`` writes uint32 for vocabularies above 65,536), else
    nanoGPT's uint16."""
    meta = directory / BIN_META
    if not meta.is_file():
        return "uint16"
    try:
        found = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "uint16"  # another tool's meta.json: the .bin files are nanoGPT's
    dtype = found.get("dtype", "uint16") if isinstance(found, dict) else "uint16"
    if dtype not in BIN_DTYPES:
        raise DataError(
            f"{meta} names dtype {dtype!r}; .bin token ids are one of {', '.join(BIN_DTYPES)}: "
            "fix meta.json or re-run recipelab tokenize"
        )
    return str(dtype)


def _bin_tokens(path: Path) -> np.memmap[Any, np.dtype[np.unsignedinteger[Any]]]:
    dtype = bin_dtype(path.parent)
    width = np.dtype(BIN_DTYPES[dtype]).itemsize
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{path} is empty: regenerate it with your tokenization script")
    if size % width:
        raise DataError(
            f"{path} is {size:,} bytes, not a multiple of {width}, so it is not {dtype} token "
            f"ids: write .bin files as np.{dtype} arrays (nanoGPT's layout is uint16)"
        )
    return np.memmap(path, dtype=BIN_DTYPES[dtype], mode="r")


def _check_ids(path: Path, tokens: TokenArray, vocab_size: int) -> None:
    largest = int(tokens.max())
    if largest >= vocab_size:
        raise DataError(
            f"{path} holds token id {largest} (max id) but the vocab size is {vocab_size}: "
            f"set shape.vocab_size to at least {largest + 1}, or re-tokenize with a smaller "
            "vocabulary"
        )


def _eval_prefix(val: TokenArray, token_bytes: npt.NDArray[np.int64],
                 eval_bytes: int) -> tuple[int, int]:
    """How many leading ``val`` tokens fit in ``eval_bytes``, and the bytes they encode: all
    of them when they encode fewer.

    Looks at a growing prefix rather than all of ``val``, which may be gigabytes.
    """
    window = min(len(val), max(1, eval_bytes))
    while True:
        total = np.cumsum(token_bytes[val[:window]])
        if total[-1] > eval_bytes or window == len(val):
            break
        window = min(len(val), 2 * window)
    if total[-1] <= eval_bytes:
        return len(total), int(total[-1])
    count = int(np.searchsorted(total, eval_bytes, side="right"))
    return count, int(total[count - 1])


def spread_tokens(val: TokenArray, token_bytes: npt.NDArray[np.int64],
                  eval_bytes: int) -> tuple[npt.NDArray[np.int32], int, bool]:
    """:func:`spread_slice` for token ids: about ``eval_bytes`` of ``val`` in pieces of
    :data:`EVAL_PIECE_BYTES`, spread evenly over it, the first piece at its start; all of it
    when it encodes no more. Returns the ids, the bytes they encode and whether they are the
    whole of ``val``."""
    count, nbytes = _eval_prefix(val, token_bytes, eval_bytes)
    if count == len(val):
        return np.asarray(val, dtype=np.int32), nbytes, True
    pieces = max(1, min(eval_bytes // EVAL_PIECE_BYTES, len(val)))
    stride = len(val) // pieces
    chosen: list[npt.NDArray[np.int32]] = []
    total = 0
    for index in range(pieces):
        size = eval_bytes // pieces + (eval_bytes % pieces if index == pieces - 1 else 0)
        region = val[index * stride:(index + 1) * stride]  # no piece reaches into the next
        taken, piece_bytes = _eval_prefix(region, token_bytes, size)
        chosen.append(np.asarray(region[:taken], dtype=np.int32))
        total += piece_bytes
    return np.concatenate(chosen), total, False


def _read_corpus(source: _Source, corpus: CorpusSpec) -> bytes:
    """The corpus as UTF-8 bytes: pieces joined by a blank line, capped at ``max_bytes``."""
    pieces: Iterable[bytes]
    if source.kind == "python-docs":
        pieces = _python_docs()
    elif source.kind == "python-source":
        pieces = _python_source()
    elif source.kind == "parquet":
        pieces = chain.from_iterable(_parquet_rows(p, corpus.text_column) for p in source.files)
    else:
        pieces = (_read_utf8(p) for p in source.files)
    data = _join_capped(pieces, _max_bytes(source, corpus))
    if not data.decode("utf-8").strip():
        raise DataError(
            f"corpus {source.label} is empty ({len(data):,} bytes, all whitespace or none): "
            "point corpus.source at files that contain text"
        )
    return data


def _python_docs() -> Iterator[bytes]:
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:
        raise DataError(
            "this Python ships without pydoc_data, which the python-docs corpus reads: use "
            "python-source or a path as corpus.source"
        ) from exc
    return (topics[key].encode("utf-8") for key in sorted(topics))


def _python_source() -> Iterator[bytes]:
    """The standard library's own ``.py`` files in sorted order, skipping non-UTF-8 ones."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in _stdlib_files(root):
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        yield data


def _stdlib_files(root: Path) -> list[Path]:
    """``.py`` files under ``root`` by relative path, pruning installed packages and caches."""
    found: list[Path] = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_STDLIB_DIRS]
        found.extend(Path(folder) / n for n in names if n.endswith(".py"))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _read_utf8(path: Path) -> bytes:
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): convert it to UTF-8 "
            "(e.g. iconv -t UTF-8) or remove it from the corpus"
        ) from exc
    return data


def _parquet_rows(path: Path, column: str) -> Iterator[bytes]:
    """The non-empty values of ``column``, streamed in small record batches through a
    buffered reader, so a capped read of a shard of many GiB stops after its first MiBs."""
    try:
        shard = pq.ParquetFile(path, buffer_size=PARQUET_BUFFER_BYTES)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path} is not a readable Parquet file ({exc}): re-download it or remove it from "
            "the corpus"
        ) from exc
    schema = shard.schema_arrow
    if column not in schema.names:
        raise DataError(
            f"{path} has no column {column!r}; its columns are {', '.join(schema.names)}: set "
            "the corpus text_column option to the one holding the text"
        )
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(
            f"column {column!r} of {path} holds {kind}, not text: set the corpus text_column "
            f"option to a string column (columns: {', '.join(schema.names)})"
        )
    try:
        for batch in shard.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[column]):
            yield from (row.encode("utf-8") for row in batch.column(0).to_pylist() if row)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{path} is corrupt ({exc}): re-download it or remove it from the corpus"
        ) from exc
    finally:
        shard.close()


def _join_capped(pieces: Iterable[bytes], max_bytes: int | None) -> bytes:
    """Join non-empty pieces with a blank line, pulling no more pieces once the cap is met,
    so a capped read of a huge corpus stays cheap."""
    joined = bytearray()
    for piece in pieces:
        if not piece:
            continue
        if joined:
            joined += SEPARATOR
        joined += piece
        if max_bytes is not None and len(joined) >= max_bytes:
            return _utf8_prefix(bytes(joined), max_bytes)
    return bytes(joined)


def _split_point(data: bytes, val_fraction: float) -> int:
    """Where validation starts: after the first newline at or past the ``1 - val_fraction``
    mark (never the final byte, so validation is not empty), else at a character boundary."""
    mark = int(len(data) * (1.0 - val_fraction))
    newline = data.find(b"\n", mark, len(data) - 1)
    return newline + 1 if newline >= 0 else _char_boundary(data, mark)


def _char_boundary(data: bytes, position: int) -> int:
    """The largest position <= ``position`` that does not split a UTF-8 character."""
    position = min(position, len(data))
    while 0 < position < len(data) and data[position] & 0xC0 == 0x80:
        position -= 1
    return position


def _utf8_prefix(data: bytes, limit: int) -> bytes:
    return data[:_char_boundary(data, limit)]


EVAL_PIECE_BYTES = 2_048
"""The evaluation slice's pieces: long enough for a few windows of context each, short enough
that a 32 KiB slice samples 16 places of the validation text."""


def spread_slice(validation: bytes, eval_bytes: int) -> bytes:
    """``eval_bytes`` of ``validation`` (or all of it, when that is no more) in pieces of
    :data:`EVAL_PIECE_BYTES`, each starting at a line spread evenly across the text: the
    slice's windows then sample the validation text rather than its first few files, and the
    sampling error their spread reports is an honest one."""
    if len(validation) <= eval_bytes:
        return validation
    count = max(1, eval_bytes // EVAL_PIECE_BYTES)
    stride = len(validation) // count
    pieces: list[bytes] = []
    for index in range(count):
        size = eval_bytes // count + (eval_bytes % count if index == count - 1 else 0)
        start = index * stride
        if index:  # the line after the mark, kept inside this piece's stride
            newline = validation.find(b"\n", start, start + stride - size)
            start = newline + 1 if newline >= 0 else _char_boundary(validation, start)
        pieces.append(_utf8_prefix(validation[start:], size))
    return b"".join(pieces)


# --- the cache ------------------------------------------------------------------------------


def _store(entry: Path, source: _Source, dataset: Dataset) -> None:
    """Write one cache entry; ``meta.json`` goes last, so its presence means complete."""
    if source.kind != "bin":  # .bin training ids are memory-mapped from the source itself
        _atomic_write(entry / "train.npy", lambda f: np.save(f, dataset.train))
    _atomic_write(entry / "eval.npy", lambda f: np.save(f, dataset.eval_tokens))
    if isinstance(dataset.tokenizer, HFTokenizer):
        tokenizer_json = dataset.tokenizer.to_json().encode("utf-8")
        _atomic_write(entry / "tokenizer.json", lambda f: f.write(tokenizer_json))
    meta = {"eval_bytes": dataset.eval_bytes, "description": dataset.description,
            "tokenizer": dataset.tokenizer.name, "eval_whole": dataset.eval_whole}
    _atomic_write(entry / "meta.json", lambda f: f.write(json.dumps(meta).encode("utf-8")))


def _load_cached(entry: Path, source: _Source, fingerprint: str,
                 vocab_size: int) -> Dataset | None:
    meta_path = entry / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    tok = (byte_tokenizer() if meta["tokenizer"] == "byte"
           else _load_tokenizer_json(entry / "tokenizer.json", vocab_size, meta["tokenizer"]))
    train: TokenArray = (_bin_tokens(source.files[0]) if source.kind == "bin"
                         else np.load(entry / "train.npy", mmap_mode="r"))
    eval_tokens: npt.NDArray[np.int32] = np.load(entry / "eval.npy", mmap_mode="r")
    return Dataset(train, eval_tokens, int(meta["eval_bytes"]), tok, fingerprint,
                   str(meta["description"]), eval_whole=bool(meta.get("eval_whole", False)))


def _atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write via a temporary file and ``os.replace`` so a reader (or a concurrent trial)
    never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
