"""Specification of recipelab.trainer.data: corpora, tokenizers, split, eval slice, batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer as HFModel
from tokenizers import decoders, models, pre_tokenizers, trainers

from recipelab.trainer.data import (
    EVAL_PIECE_BYTES,
    DataError,
    Dataset,
    load_dataset,
    spread_slice,
    spread_tokens,
)
from recipelab.trainer.spec import CorpusSpec
from tests.trainer.text_samples import ASCII_WORDS, prose


def corpus(tmp_path: Path, source: Path | str, **options: Any) -> CorpusSpec:
    return CorpusSpec(source=str(source), cache_dir=str(tmp_path / "cache"), **options)


def load(spec: CorpusSpec, tokenizer: str = "byte", vocab_size: int = 256,
         eval_bytes: int = 512, min_train_tokens: int = 1) -> Dataset:
    return load_dataset(spec, tokenizer=tokenizer, vocab_size=vocab_size,
                        eval_bytes=eval_bytes, min_train_tokens=min_train_tokens)


def text_of(tokens: np.ndarray) -> bytes:
    """The bytes a byte-tokenized array encodes."""
    return np.asarray(tokens, dtype=np.uint8).tobytes()


def corpus_bytes(ds: Dataset) -> int:
    """The corpus size a description reports: 466,195 in "python-docs (466,195 bytes; ..."."""
    return int(ds.description.split("(")[1].split(" bytes")[0].replace(",", ""))


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def train_hf_bpe(text: str, vocab_size: int, special: list[str]) -> HFModel:
    hf = HFModel(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=special, show_progress=False))
    return hf


def make_bin_corpus(root: Path, *, tokenizer_json: bool = True) -> HFModel:
    """A nanoGPT-style directory: documents tokenized with a GPT-2-like BPE, EOT-separated."""
    text = prose(400, words=ASCII_WORDS)
    hf = train_hf_bpe(text, 320, ["<|endoftext|>"])
    eot = hf.token_to_id("<|endoftext|>")
    ids = [i for doc in text.splitlines() for i in [*hf.encode(doc).ids, eot]]
    tokens = np.array(ids, dtype=np.uint16)
    root.mkdir(parents=True, exist_ok=True)
    cut = len(tokens) * 9 // 10
    tokens[:cut].tofile(root / "train.bin")
    tokens[cut:].tofile(root / "val.bin")
    if tokenizer_json:
        hf.save(str(root / "tokenizer.json"))
    return hf


# --- each corpus type loads -------------------------------------------------------------------


def test_a_text_file_loads_with_a_description_of_its_split(tmp_path: Path) -> None:
    text = prose(200)
    path = write_text(tmp_path / "corpus.txt", text)
    ds = load(corpus(tmp_path, path))
    size = len(text.encode())
    train = len(ds.train)
    assert ds.description == f"{path} ({size:,} bytes; {train:,} train / {size - train:,} val)"
    assert ds.train.dtype == np.int32 and ds.eval_tokens.dtype == np.int32


def test_a_directory_of_txt_and_md_files_loads_recursively_in_sorted_order(
        tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_text(root / "b" / "second.md", "SECOND\n" + prose(100, 1))
    write_text(root / "a" / "first.txt", "FIRST\n" + prose(100, 2))
    write_text(root / "ignored.py", "IGNORED\n")
    ds = load(corpus(tmp_path, root))
    train = text_of(ds.train)
    assert train.startswith(b"FIRST\n")
    assert b"\n\nSECOND\n" in train
    assert b"IGNORED" not in train


def test_a_parquet_file_loads_only_its_text_column_rows_joined_by_blank_lines(
        tmp_path: Path) -> None:
    rows = [prose(5, i) for i in range(60)]
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"id": list(range(60)), "text": rows}), path)
    ds = load(corpus(tmp_path, path))
    assert text_of(ds.train) == "\n\n".join(rows).encode()[: len(ds.train)]


def test_a_directory_of_parquet_shards_reads_every_shard_and_honours_text_column(
        tmp_path: Path) -> None:
    root = tmp_path / "fineweb" / "data" / "CC-MAIN-2024-10"
    root.mkdir(parents=True)
    for shard in range(2):
        rows = [f"shard{shard} " + prose(5, 10 * shard + i) for i in range(40)]
        pq.write_table(pa.table({"content": rows, "score": [1.0] * 40}),
                       root / f"00{shard}_00000.parquet")
    ds = load(corpus(tmp_path, tmp_path / "fineweb", text_column="content"))
    train = text_of(ds.train)
    assert train.startswith(b"shard0 ")
    assert b"shard1 " in train


def test_a_nanogpt_bin_directory_is_memory_mapped_and_its_eval_slice_fits_the_budget(
        tmp_path: Path) -> None:
    hf = make_bin_corpus(tmp_path / "bin")
    val = np.fromfile(tmp_path / "bin" / "val.bin", dtype=np.uint16)
    ds = load(corpus(tmp_path, tmp_path / "bin"), vocab_size=320, eval_bytes=700)
    assert isinstance(ds.train, np.memmap) and ds.train.dtype == np.uint16
    count = len(ds.eval_tokens)
    assert np.array_equal(ds.eval_tokens, val[:count])
    token_bytes = ds.tokenizer.token_bytes
    assert ds.eval_bytes == int(token_bytes[ds.eval_tokens].sum()) <= 700
    assert ds.eval_bytes + token_bytes[val[count]] > 700, "the slice is as long as fits"
    assert ds.eval_bytes == len(ds.tokenizer.decode(ds.eval_tokens).encode())
    assert token_bytes[hf.token_to_id("<|endoftext|>")] == 0, "a separator encodes no bytes"


def test_the_python_docs_corpus_is_the_pydoc_topics_in_sorted_key_order(tmp_path: Path) -> None:
    from pydoc_data.topics import topics

    ds = load(corpus(tmp_path, "python-docs"), eval_bytes=4096)
    first = topics[min(topics)]
    assert text_of(ds.train[: len(first.encode())]).decode() == first
    assert ds.description.startswith("python-docs (")


def test_the_python_source_corpus_is_the_stdlib_capped_at_max_bytes(tmp_path: Path) -> None:
    ds = load(corpus(tmp_path, "python-source", max_bytes=100_000), eval_bytes=4096)
    assert 100_000 - 4 < corpus_bytes(ds) <= 100_000
    assert b"def " in text_of(ds.train)


def test_the_python_source_corpus_defaults_to_an_8_mib_cap(tmp_path: Path) -> None:
    ds = load(corpus(tmp_path, "python-source"), eval_bytes=4096)
    assert 8 * 2**20 - 4 < corpus_bytes(ds) <= 8 * 2**20


# --- split and eval slice -------------------------------------------------------------------------


@pytest.mark.parametrize(("tokenizer", "vocab_size"), [("byte", 256), ("bpe", 512)])
def test_eval_bytes_is_cut_back_to_a_character_and_equals_the_token_bytes_of_eval_tokens(
        tmp_path: Path, tokenizer: str, vocab_size: int) -> None:
    text = ("日本語のテキスト🙂 データ " * 30 + "\n") * 40
    spec = corpus(tmp_path, write_text(tmp_path / "cjk.txt", text), val_fraction=0.2)
    ds = load(spec, tokenizer=tokenizer, vocab_size=vocab_size, eval_bytes=1001)
    assert 1001 - 3 <= ds.eval_bytes <= 1001
    assert ds.eval_bytes == int(ds.tokenizer.token_bytes[ds.eval_tokens].sum())
    eval_text = ds.tokenizer.decode(ds.eval_tokens)
    assert "\ufffd" not in eval_text and len(eval_text.encode()) == ds.eval_bytes


def test_the_split_is_deterministic_and_train_and_validation_do_not_overlap(
        tmp_path: Path) -> None:
    text = prose(300)
    path = write_text(tmp_path / "corpus.txt", text)
    one = load(CorpusSpec(source=str(path), cache_dir=str(tmp_path / "one")))
    two = load(CorpusSpec(source=str(path), cache_dir=str(tmp_path / "two")))
    assert one.fingerprint == two.fingerprint
    assert np.array_equal(one.train, two.train)
    assert np.array_equal(one.eval_tokens, two.eval_tokens)
    raw, train = text.encode(), text_of(one.train)
    assert raw.startswith(train) and train.endswith(b"\n"), "validation starts on a new line"
    assert raw[len(train):].startswith(text_of(one.eval_tokens)), "eval comes from validation"
    assert 0.85 < len(train) / len(raw) < 0.95


def test_without_a_newline_the_split_still_never_cuts_a_utf8_character(tmp_path: Path) -> None:
    text = "日本語🙂" * 3000
    ds = load(corpus(tmp_path, write_text(tmp_path / "one-line.txt", text)), eval_bytes=1000)
    train = text_of(ds.train)
    assert text.startswith(train.decode())
    assert text_of(ds.eval_tokens).decode() in text


def test_max_bytes_caps_a_text_corpus(tmp_path: Path) -> None:
    path = write_text(tmp_path / "corpus.txt", prose(2000))
    ds = load(corpus(tmp_path, path, max_bytes=20_000))
    assert 20_000 - 4 < corpus_bytes(ds) <= 20_000
    assert text_of(ds.train).decode(), "the cap does not split a character"


# --- caching ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tokenizer", "vocab_size"), [("byte", 256), ("bpe", 400)])
def test_a_second_load_of_an_unchanged_corpus_reads_and_tokenizes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tokenizer: str,
        vocab_size: int) -> None:
    path = write_text(tmp_path / "corpus.txt", prose(300))
    spec = corpus(tmp_path, path)
    first = load(spec, tokenizer=tokenizer, vocab_size=vocab_size)

    read_bytes = Path.read_bytes

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached dataset was re-tokenized")

    def read_anything_but_the_source(self: Path) -> bytes:
        assert self != path, "the cached corpus was re-read"
        return read_bytes(self)

    monkeypatch.setattr(type(first.tokenizer), "encode", refuse)
    monkeypatch.setattr(Path, "read_bytes", read_anything_but_the_source)
    second = load(spec, tokenizer=tokenizer, vocab_size=vocab_size)
    assert second.fingerprint == first.fingerprint
    assert isinstance(second.train, np.memmap), "cached tokens are memory-mapped"
    assert np.array_equal(second.train, first.train)
    assert np.array_equal(second.eval_tokens, first.eval_tokens)
    assert second.tokenizer.name == first.tokenizer.name
    assert np.array_equal(second.tokenizer.token_bytes, first.tokenizer.token_bytes)


def test_changing_a_source_file_invalidates_the_cache(tmp_path: Path) -> None:
    path = write_text(tmp_path / "corpus.txt", prose(300))
    spec = corpus(tmp_path, path)
    before = load(spec)
    write_text(path, "CHANGED\n" + prose(300))
    after = load(spec)
    assert after.fingerprint != before.fingerprint
    assert text_of(after.train).startswith(b"CHANGED\n")


def test_the_cache_falls_back_to_the_recipelab_cache_environment_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPELAB_CACHE", str(tmp_path / "env-cache"))
    path = write_text(tmp_path / "corpus.txt", prose(300))
    ds = load(CorpusSpec(source=str(path)))
    assert (tmp_path / "env-cache" / "datasets" / ds.fingerprint / "meta.json").is_file()


# --- bad inputs ---------------------------------------------------------------------------------


def test_a_missing_path_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nowhere\.txt does not exist.*corpus\.source"):
        load(corpus(tmp_path, tmp_path / "nowhere.txt"))


def test_a_directory_without_corpus_files_is_an_error(tmp_path: Path) -> None:
    write_text(tmp_path / "src" / "code.py", "print(1)\n")
    with pytest.raises(DataError, match=r"no \.txt, \.md, \.parquet or train\.bin/val\.bin"):
        load(corpus(tmp_path, tmp_path / "src"))


@pytest.mark.parametrize("content", ["", " \n\t\n  "])
def test_an_empty_or_whitespace_only_corpus_is_an_error(tmp_path: Path, content: str) -> None:
    path = write_text(tmp_path / "empty.txt", content)
    with pytest.raises(DataError, match=r"is empty.*files that contain text"):
        load(corpus(tmp_path, path))


def test_a_text_file_that_is_not_utf8_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(prose(50).encode() + "café".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.txt is not UTF-8.*convert it"):
        load(corpus(tmp_path, path))


def test_a_corrupt_parquet_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"this is not parquet at all")
    with pytest.raises(DataError, match=r"broken\.parquet is not a readable Parquet file"):
        load(corpus(tmp_path, path))


def test_a_parquet_file_without_the_text_column_lists_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"id": [1], "body": ["hello"]}), path)
    with pytest.raises(DataError, match=r"no column 'text'.*columns are id, body.*text_column"):
        load(corpus(tmp_path, path))


def test_a_parquet_text_column_that_is_not_strings_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), path)
    with pytest.raises(DataError, match=r"holds int64, not text.*text_column"):
        load(corpus(tmp_path, path))


def test_a_bin_file_whose_size_is_odd_is_not_uint16_and_is_an_error(tmp_path: Path) -> None:
    make_bin_corpus(tmp_path / "bin")
    with (tmp_path / "bin" / "train.bin").open("ab") as handle:
        handle.write(b"\x00")
    with pytest.raises(DataError, match=r"train\.bin .*not a multiple of 2.*uint16"):
        load(corpus(tmp_path, tmp_path / "bin"), vocab_size=320)


def test_token_ids_beyond_the_vocab_are_an_error_naming_the_max_id(tmp_path: Path) -> None:
    make_bin_corpus(tmp_path / "bin")
    np.array([1, 2, 400, 3], dtype=np.uint16).tofile(tmp_path / "bin" / "val.bin")
    message = r"val\.bin holds token id 400 \(max id\).*vocab size is 320"
    with pytest.raises(DataError, match=message):
        load(corpus(tmp_path, tmp_path / "bin"), vocab_size=320)


def test_bin_files_without_their_tokenizer_json_are_an_error(tmp_path: Path) -> None:
    make_bin_corpus(tmp_path / "bin", tokenizer_json=False)
    with pytest.raises(DataError, match=r"no tokenizer\.json.*put the tokenizer\.json"):
        load(corpus(tmp_path, tmp_path / "bin"), vocab_size=320)


def test_a_train_bin_without_a_val_bin_is_an_error(tmp_path: Path) -> None:
    make_bin_corpus(tmp_path / "bin")
    (tmp_path / "bin" / "val.bin").unlink()
    with pytest.raises(DataError, match=r"holds train\.bin but not val\.bin"):
        load(corpus(tmp_path, tmp_path / "bin"), vocab_size=320)


def test_a_validation_text_shorter_than_the_eval_budget_is_scored_whole(tmp_path: Path) -> None:
    path = write_text(tmp_path / "small.txt", prose(40))
    ds = load(corpus(tmp_path, path), eval_bytes=100_000)
    validation = path.read_bytes()[-ds.eval_bytes:]
    assert 0 < ds.eval_bytes < 100_000
    assert ds.tokenizer.decode(ds.eval_tokens).encode() == validation


def test_a_val_bin_shorter_than_the_eval_budget_is_scored_whole(tmp_path: Path) -> None:
    make_bin_corpus(tmp_path / "bin")
    ds = load(corpus(tmp_path, tmp_path / "bin"), vocab_size=320, eval_bytes=10**7)
    val = np.fromfile(tmp_path / "bin" / "val.bin", dtype=np.uint16)
    assert len(ds.eval_tokens) == len(val)


def test_the_eval_slice_samples_the_whole_validation_text() -> None:
    """Pieces from evenly spaced lines, not the first few files: the start, the middle and
    the end of the validation text are all scored."""
    validation = b"".join(f"line {i:05d} of the validation text\n".encode() for i in range(5000))
    piece = spread_slice(validation, 16 * EVAL_PIECE_BYTES)
    assert len(piece) == 16 * EVAL_PIECE_BYTES
    lines = [int(line.split()[1]) for line in piece.split(b"\n")
             if line.startswith(b"line ") and len(line.split()) > 1 and line.split()[1].isdigit()]
    assert min(lines) == 0 and max(lines) > 4600
    assert len({n * 16 // 5000 for n in lines}) == 16, "every sixteenth of the text is scored"
    assert spread_slice(validation[:1000], 4096) == validation[:1000]


def test_a_bin_eval_slice_samples_the_whole_validation_file() -> None:
    """Token ids are spread like text: pieces of about EVAL_PIECE_BYTES from evenly spaced
    places, the first at the start, each encoding no more than its share."""
    val = np.arange(40_000, dtype=np.uint16)  # each id is its own position
    token_bytes = 1 + np.arange(40_000, dtype=np.int64) % 3
    ids, nbytes, whole = spread_tokens(val, token_bytes, 8 * EVAL_PIECE_BYTES)
    assert not whole and nbytes == int(token_bytes[ids].sum()) <= 8 * EVAL_PIECE_BYTES
    assert nbytes > 8 * (EVAL_PIECE_BYTES - 3), "each piece is as long as fits"
    assert ids[0] == 0 and np.all(np.diff(ids.astype(np.int64)) > 0)
    assert len({int(i) * 8 // len(val) for i in ids}) == 8, "every eighth of the file is scored"
    short = val[:500]
    assert spread_tokens(short, token_bytes, 10**6)[1:] == (int(token_bytes[short].sum()), True)


def test_a_corpus_smaller_than_one_batch_says_how_many_tokens_it_has_and_needs(
        tmp_path: Path) -> None:
    path = write_text(tmp_path / "small.txt", prose(100))
    message = r"has [\d,]+ training tokens but one batch needs 1,000,000.*smaller batch_size"
    with pytest.raises(DataError, match=message):
        load(corpus(tmp_path, path), min_train_tokens=1_000_000)


def test_an_unknown_tokenizer_name_is_an_error_listing_the_choices(tmp_path: Path) -> None:
    path = write_text(tmp_path / "corpus.txt", prose(100))
    with pytest.raises(DataError, match=r"unknown tokenizer 'sentencepiece'.*byte, bpe"):
        load(corpus(tmp_path, path), tokenizer="sentencepiece")
