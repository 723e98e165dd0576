"""``recipelab tokenize``: a corpus to nanoGPT-style ``train.bin`` / ``val.bin``, once.

A long run reads its corpus for days; tokenizing it in every process at start-up (as a trial
does, through the cache) would cost each of the run's GPUs the same minutes of CPU. This
writes the ids once, in a directory :func:`~recipelab.trainer.data.load_dataset` reads as a
``bin`` corpus, so ``recipelab pretrain --corpus DIR`` memory-maps them:

- ``train.bin`` / ``val.bin``: the ids, uint16 when the vocabulary fits in 65,536 ids
  (nanoGPT's layout), else uint32 (named in ``meta.json``, which the ``bin`` reader honours);
- ``tokenizer.json``: the tokenizer that made them (the ``bin`` reader takes each id's bytes
  from it, for val_bpb), also for the byte tokenizer, as a byte-level BPE without merges;
- ``meta.json``: the source, tokenizer, id type, counts of tokens and bytes, written last.

The text is the corpus exactly as the trainer reads it (the same readers, the same blank line
between documents, the same ``max_bytes`` cap), split where the trainer splits it: the last
``val_fraction`` of the text, at a newline. Its ids are exactly the trainer's: the text is cut
into chunks only where the tokenizer's ids do not change (anywhere for bytes, where GPT-2's
pre-tokenizer splits anyway for a byte-level BPE), the chunks are encoded by a process pool
and written in order, so any number of workers writes the same bytes as one. A tokenizer that
is not GPT-2-style (a normalizer, another pre-tokenizer) is encoded in one piece.

The default ``val_fraction`` is nanoGPT's for OpenWebText (0.0005): on a corpus of billions of
tokens that is millions of held-out tokens, more than an evaluation reads; a small corpus
needs a larger one (``--val-fraction``) to hold the evaluation slice. The whole text is held
in memory while it is encoded, as the trainer's own tokenization does; ``--max-bytes`` caps it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recipelab.cores import allowed_cpus
from recipelab.trainer.data import BIN_META, DataError, read_corpus_text, tokenizer_cache_dir
from recipelab.trainer.spec import CorpusSpec
from recipelab.trainer.tokenizer import (
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    bpe_tokenizer,
    byte_tokenizer,
    byte_tokenizer_json,
    text_chunks,
    tokenizer_from_file,
)

DEFAULT_VAL_FRACTION = 0.0005
DEFAULT_VOCAB_SIZE = 32_768
CHUNK_CHARS = 1 << 20
"""Characters per unit of work: large enough that pickling a chunk to a worker costs little
next to encoding it, small enough to spread a few MiB over every core."""
UINT16_VOCAB = 1 << 16
META_FORMAT = 1


@dataclass(frozen=True)
class Tokenized:
    """What :func:`tokenize_corpus` wrote."""

    out: Path
    source: str
    tokenizer: str
    vocab_size: int
    dtype: str
    train_tokens: int
    val_tokens: int
    train_bytes: int
    val_bytes: int


def choose_tokenizer(name: str, train_text: str, vocab_size: int, corpus: CorpusSpec
                     ) -> tuple[Tokenizer, str]:
    """The tokenizer ``name`` (``byte``, ``bpe`` trained on ``train_text`` like the trainer's,
    or the path of a ``tokenizer.json``) and its ``tokenizer.json`` text."""
    if name == "byte":
        return byte_tokenizer(), byte_tokenizer_json()
    if name == "bpe":
        tokenizer = bpe_tokenizer(train_text, vocab_size, tokenizer_cache_dir(corpus))
    else:
        tokenizer = tokenizer_from_file(Path(name).expanduser())
    assert isinstance(tokenizer, HFTokenizer)
    return tokenizer, tokenizer.to_json()


def tokenize_corpus(corpus: CorpusSpec, tokenizer: str, out: Path, *,
                    vocab_size: int = DEFAULT_VOCAB_SIZE, workers: int | None = None,
                    chunk_chars: int = CHUNK_CHARS) -> Tokenized:
    """Write ``train.bin``, ``val.bin``, ``tokenizer.json`` and ``meta.json`` into ``out``
    for ``corpus`` (its ``val_fraction`` held out); nothing is left half-written on failure."""
    workers = workers or allowed_cpus()
    if workers < 1:
        raise DataError(f"--workers must be at least 1, got {workers}")
    label, data, cut = read_corpus_text(corpus)
    train_text, val_text = data[:cut].decode("utf-8"), data[cut:].decode("utf-8")
    tok, tokenizer_json = choose_tokenizer(tokenizer, train_text, vocab_size, corpus)
    dtype = "uint16" if tok.vocab_size <= UINT16_VOCAB else "uint32"
    out.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        with _Encoder(tok, tokenizer_json, dtype, workers) as encoder:
            counts: dict[str, int] = {}
            for part, text in (("train", train_text), ("val", val_text)):
                path = _stage(out, f"{part}.bin")
                staged.append((path, out / f"{part}.bin"))
                with path.open("wb") as handle:
                    for ids in encoder.encode(text_chunks(tok, text, chunk_chars)):
                        handle.write(ids)
                counts[part] = path.stat().st_size // np.dtype(dtype).itemsize
        path = _stage(out, "tokenizer.json")
        path.write_text(tokenizer_json, encoding="utf-8")
        staged.append((path, out / "tokenizer.json"))
        result = Tokenized(out, label, tok.name, tok.vocab_size, dtype, counts["train"],
                           counts["val"], cut, len(data) - cut)
        meta = _stage(out, BIN_META)
        meta.write_text(json.dumps(_meta(result, corpus), indent=2) + "\n", encoding="utf-8")
        staged.append((meta, out / BIN_META))  # renamed last: its presence means complete
        for temporary, final in staged:
            temporary.replace(final)
    except BaseException:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise
    return result


def _meta(result: Tokenized, corpus: CorpusSpec) -> dict[str, Any]:
    return {"format": META_FORMAT, "source": result.source, "tokenizer": result.tokenizer,
            "vocab_size": result.vocab_size, "dtype": result.dtype,
            "val_fraction": corpus.val_fraction, "max_bytes": corpus.max_bytes,
            "train_tokens": result.train_tokens, "val_tokens": result.val_tokens,
            "train_bytes": result.train_bytes, "val_bytes": result.val_bytes}


def _stage(out: Path, name: str) -> Path:
    """A new, empty temporary file beside ``out/name`` (with the umask's permissions, unlike
    ``mkstemp``'s private ones), renamed over it once everything is written."""
    path = out / f".{name}.{os.getpid()}.tmp"
    path.open("wb").close()
    return path


# --- the process pool -----------------------------------------------------------------------

_worker_tokenizer: Tokenizer | None = None
_worker_dtype = "uint16"


def _start_worker(tokenizer_json: str | None, dtype: str) -> None:
    """Rebuild the tokenizer in a worker; tokenizers' own threads stay off there, since the
    pool already has a process per core."""
    global _worker_tokenizer, _worker_dtype
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if tokenizer_json is None:
        _worker_tokenizer = byte_tokenizer()
    else:
        from tokenizers import Tokenizer as HFModel

        model = HFModel.from_str(tokenizer_json)
        vocab = model.get_vocab_size(with_added_tokens=True)
        _worker_tokenizer = HFTokenizer(model, "worker", vocab)
    _worker_dtype = dtype


def _encode_chunk(text: str) -> bytes:
    assert _worker_tokenizer is not None, "the pool's initializer builds the tokenizer"
    return _worker_tokenizer.encode(text).astype(_worker_dtype).tobytes()


class _Encoder:
    """Chunks to id bytes, in order: in this process for one worker, else in a pool."""

    def __init__(self, tokenizer: Tokenizer, tokenizer_json: str, dtype: str,
                 workers: int) -> None:
        self._tokenizer, self._dtype, self._workers = tokenizer, dtype, workers
        self._json = None if isinstance(tokenizer, ByteTokenizer) else tokenizer_json
        self._pool: Any = None

    def __enter__(self) -> _Encoder:
        if self._workers > 1:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            context = multiprocessing.get_context(method)
            self._pool = context.Pool(self._workers, initializer=_start_worker,
                                      initargs=(self._json, self._dtype))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()

    def encode(self, chunks: list[str]) -> Iterator[bytes]:
        if self._pool is None:
            for chunk in chunks:
                yield self._tokenizer.encode(chunk).astype(self._dtype).tobytes()
        else:
            yield from self._pool.imap(_encode_chunk, chunks)
