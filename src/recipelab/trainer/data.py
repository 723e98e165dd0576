"""Training data: corpora, a deterministic split and a fixed evaluation slice, tokenized once
(tokenizers: :mod:`recipelab.trainer.tokenizer`; batches: :mod:`recipelab.trainer.batches`).

Every trial of a campaign must be scored on the same held-out bytes, or val_bpb would not
compare across trials. So the split is a pure function of the corpus (the last
``val_fraction`` of the text, cut at a newline), the evaluation slice is ``eval_bytes`` bytes
drawn in evenly spaced pieces across the whole validation text (:func:`spread_slice`: the
first bytes alone would be a few neighbouring files, whose windows are not independent), and
its bytes are counted through the tokenizer's ``token_bytes``.

Each trial is a fresh process, and tokenizing a few MiB of text takes seconds, so the
tokenized arrays are cached as ``.npy`` files keyed by a cheap fingerprint (file paths,
sizes and mtimes, or the Python version for the built-in corpora) and memory-mapped on the
next load. A corpus capped by ``max_bytes`` (``--corpus-max-bytes``; a campaign sets it to
what its longest run reads) is streamed: files in sorted order, Parquet in small batches,
stopping once the cap is reached, so a FineWeb-Edu sample of tens of GB costs what the
campaign uses, not its size.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import warnings
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

from recipelab import environment
from recipelab.locking import FileLock
from recipelab.trainer.spec import CorpusSpec, DataError
from recipelab.trainer.tokenizer import (
    HFTokenizer,
    TokenArray,
    Tokenizer,
    bpe_tokenizer,
    byte_tokenizer,
    load_tokenizer_json,
)

__all__ = [
    "DataError",
    "Dataset",
    "bin_dtype",
    "load_dataset",
    "read_corpus_text",
    "tokenizer_cache_dir",
]

SourceKind = Literal["python-docs", "python-source", "text", "parquet", "bin"]

BUILTIN_CORPORA: tuple[SourceKind, ...] = ("python-docs", "python-source")
TOKENIZERS = ("byte", "bpe")
TEXT_SUFFIXES = (".txt", ".md")
SEPARATOR = b"\n\n"
PYTHON_SOURCE_MAX_BYTES = 8 << 20
SKIPPED_STDLIB_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
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
    tok = load_tokenizer_json(tokenizer_path, vocab_size)
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
           else load_tokenizer_json(entry / "tokenizer.json", vocab_size, meta["tokenizer"]))
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
