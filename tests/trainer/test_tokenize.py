"""``recipelab tokenize``: a corpus to nanoGPT-style train.bin / val.bin that the trainer reads
as a ``bin`` corpus, holding exactly the ids the trainer would make, whatever the workers."""

from __future__ import annotations

import csv
import errno
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer as HFModel
from tokenizers import decoders, models, pre_tokenizers
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.targets import proxy_recipe
from recipelab.trainer import tokenize as tokenize_module
from recipelab.trainer.data import load_dataset, read_corpus_text
from recipelab.trainer.spec import CorpusSpec
from recipelab.trainer.tokenize import tokenize_corpus
from recipelab.trainer.tokenizer import (
    HFTokenizer,
    byte_tokenizer,
    byte_tokenizer_json,
    tokenizer_from_file,
)

CHUNK = 8192  # many chunks from the ~470 KB python-docs corpus, so the pool has work to order


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> CorpusSpec:
    return CorpusSpec(source="python-docs", val_fraction=0.05,
                      cache_dir=str(tmp_path_factory.mktemp("tokenize-cache")))


def ids(directory: Path, name: str) -> np.ndarray:
    dtype = json.loads((directory / "meta.json").read_text())["dtype"]
    return np.fromfile(directory / name, dtype=dtype)


def test_any_number_of_workers_writes_the_bytes_one_worker_writes(docs: CorpusSpec,
                                                                    tmp_path: Path) -> None:
    one = tokenize_corpus(docs, "bpe", tmp_path / "one", vocab_size=512, workers=1,
                          chunk_chars=CHUNK)
    two = tokenize_corpus(docs, "bpe", tmp_path / "two", vocab_size=512, workers=2,
                          chunk_chars=CHUNK)
    assert one.train_bytes > 40 * CHUNK  # dozens of chunks crossed the pool
    for name in ("train.bin", "val.bin", "tokenizer.json", "meta.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    assert replace(two, out=one.out) == one


def test_the_ids_are_the_trainers_own_and_decode_back_to_the_corpus(docs: CorpusSpec,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "docs"
    done = tokenize_corpus(docs, "bpe", out, vocab_size=512, workers=2, chunk_chars=CHUNK)
    assert done.dtype == "uint16" and (out / "train.bin").stat().st_size == 2 * done.train_tokens
    _, data, _ = read_corpus_text(docs)
    tokenizer = tokenizer_from_file(out / "tokenizer.json")
    train, val = ids(out, "train.bin"), ids(out, "val.bin")
    assert tokenizer.decode(train) + tokenizer.decode(val) == data.decode("utf-8")
    # the trainer, reading the same text corpus, trains the same BPE and makes the same ids
    text_dataset = load_dataset(docs, tokenizer="bpe", vocab_size=512, eval_bytes=4096,
                                min_train_tokens=1)
    assert np.array_equal(np.asarray(text_dataset.train), train)
    # and the directory loads as a bin corpus with the same ids; its evaluation slice is the
    # validation prefix, where a text corpus's is spread across it: they share the first piece
    bin_dataset = load_dataset(CorpusSpec(source=str(out), cache_dir=docs.cache_dir),
                               tokenizer="bpe", vocab_size=512, eval_bytes=4096,
                               min_train_tokens=1)
    assert np.array_equal(np.asarray(bin_dataset.train), train)
    assert np.array_equal(np.asarray(bin_dataset.eval_tokens)[:100],
                          np.asarray(text_dataset.eval_tokens)[:100])


@pytest.mark.parametrize("fraction", [0.0005, 0.01, 0.2])
def test_the_val_fraction_is_the_last_share_of_the_text_cut_at_a_newline(
        docs: CorpusSpec, tmp_path: Path, fraction: float) -> None:
    corpus = docs.model_copy(update={"val_fraction": fraction})
    done = tokenize_corpus(corpus, "byte", tmp_path / "out", workers=1)
    total = done.train_bytes + done.val_bytes
    _, data, _ = read_corpus_text(corpus)
    assert total == len(data)
    mark, cut = int(total * (1 - fraction)), done.train_bytes
    assert cut - 1 >= mark and data[cut - 1:cut] == b"\n" and b"\n" not in data[mark:cut - 1]
    assert done.val_tokens == done.val_bytes == len(ids(tmp_path / "out", "val.bin"))
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["val_fraction"] == fraction and meta["val_tokens"] == done.val_tokens


def test_byte_ids_are_the_bytes_and_their_tokenizer_json_decodes_them(docs: CorpusSpec,
                                                                      tmp_path: Path) -> None:
    text = "naïve café ☕ — and \n\n  spaces\ttabs"
    model = HFModel.from_str(byte_tokenizer_json())
    assert model.encode(text).ids == list(text.encode("utf-8"))
    assert byte_tokenizer().encode(text).tolist() == list(text.encode("utf-8"))
    assert tokenizer_from_file_text(tmp_path, byte_tokenizer_json()).token_bytes.tolist() == [1] * 256
    out = tmp_path / "bytes"
    tokenize_corpus(docs, "byte", out, workers=2, chunk_chars=CHUNK)
    _, data, cut = read_corpus_text(docs)
    assert ids(out, "train.bin").tobytes() == np.frombuffer(data[:cut], np.uint8).astype(
        np.uint16).tobytes()


def tokenizer_from_file_text(directory: Path, text: str) -> HFTokenizer:
    path = directory / "tokenizer.json"
    path.write_text(text)
    return tokenizer_from_file(path)


def gpt2_style_tokenizer(path: Path, extra_ids: int = 0) -> Path:
    """A GPT-2-style byte-level BPE made here (this machine cannot download GPT-2's), with an
    ``<|endoftext|>`` after ``extra_ids`` unused ids, as a tokenizer.json."""
    model = HFModel.from_str(byte_tokenizer_json())
    if extra_ids:
        vocab = {**model.get_vocab(), **{f"<unused{i}>": 256 + i for i in range(extra_ids)}}
        model = HFModel(models.BPE(vocab=vocab, merges=[]))
        model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        model.decoder = decoders.ByteLevel()
    model.add_special_tokens(["<|endoftext|>"])
    model.save(str(path))
    return path


def test_a_vocabulary_over_65536_ids_is_written_as_uint32_and_read_back(tmp_path: Path) -> None:
    text_dir = tmp_path / "text"
    text_dir.mkdir()
    (text_dir / "a.txt").write_text("hello world\n" * 3000)
    tokenizer = gpt2_style_tokenizer(tmp_path / "big.json", extra_ids=70_000)
    corpus = CorpusSpec(source=str(text_dir), val_fraction=0.2, cache_dir=str(tmp_path / "c"))
    done = tokenize_corpus(corpus, str(tokenizer), tmp_path / "out", workers=1)
    assert done.dtype == "uint32" and done.vocab_size == 70_257
    dataset = load_dataset(CorpusSpec(source=str(tmp_path / "out"), cache_dir=str(tmp_path / "c")),
                           tokenizer="bpe", vocab_size=70_257, eval_bytes=1024, min_train_tokens=1)
    assert np.array_equal(np.asarray(dataset.train), np.frombuffer(
        ("hello world\n" * 3000).encode()[:done.train_bytes], np.uint8))


def test_a_given_tokenizer_json_encodes_the_corpus(docs: CorpusSpec, tmp_path: Path) -> None:
    path = gpt2_style_tokenizer(tmp_path / "tokenizer.json")
    result = CliRunner().invoke(app, ["tokenize", "--corpus", "python-docs", "--out",
                                      str(tmp_path / "out"), "--tokenizer", str(path),
                                      "--val-fraction", "0.05", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "uint16" in result.output and "vocabulary 257" in result.output
    _, data, _ = read_corpus_text(docs)
    train, val = ids(tmp_path / "out", "train.bin"), ids(tmp_path / "out", "val.bin")
    assert np.concatenate([train, val]).tobytes() == np.frombuffer(data, np.uint8).astype(
        np.uint16).tobytes()


@pytest.mark.parametrize(("options", "says"), [
    (["--corpus", "/no/such/corpus"], "corpus path /no/such/corpus does not exist"),
    (["--tokenizer", "NOT_A_TOKENIZER"], "tokenizer file NOT_A_TOKENIZER does not exist"),
    (["--val-fraction", "0.7"], "val_fraction: Input should be less than 0.5"),
    (["--val-fraction", "0"], "val_fraction: Input should be greater than 0"),
])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path: Path, options: list[str],
                                                says: str) -> None:
    result = CliRunner().invoke(app, ["tokenize", "--out", str(tmp_path / "out"), *options])
    assert result.exit_code == 2
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert says in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_file_that_is_not_a_tokenizer_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    result = CliRunner().invoke(app, ["tokenize", "--out", str(tmp_path / "out"),
                                      "--tokenizer", str(bad)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert f"{bad} is not a readable tokenizer.json" in result.output


def test_a_failure_midway_leaves_no_half_written_file_and_the_old_output_intact(
        docs: CorpusSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    tokenize_corpus(docs, "byte", out, workers=1, chunk_chars=CHUNK)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    encode = tokenize_module._Encoder.encode

    def disk_full(self: tokenize_module._Encoder, chunks: list[str]) -> Iterator[bytes]:
        # A mock: a full disk cannot be produced for real in a test.
        yield next(encode(self, chunks))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tokenize_module._Encoder, "encode", disk_full)
    with pytest.raises(OSError, match="No space left"):
        tokenize_corpus(docs.model_copy(update={"val_fraction": 0.2}), "byte", out, workers=1,
                        chunk_chars=CHUNK)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no .tmp left either


def test_pretrain_trains_on_the_tokenized_directory(docs: CorpusSpec, tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["tokenize", "--corpus", "python-docs", "--out", str(data),
                                      "--tokenizer", "bpe", "--vocab-size", "512",
                                      "--val-fraction", "0.05", "--workers", "2"])
    assert result.exit_code == 0, result.output
    recipe = proxy_recipe("tiny").apply({"tokenizer": "bpe", "shape.vocab_size": 512,
                                         "steps": 4, "eval_bytes": 2048})
    (tmp_path / "recipe.json").write_text(recipe.model_dump_json())
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "pretrain", "--recipe", str(tmp_path / "recipe.json"), "--out", str(run), "--corpus",
        str(data), "--log-every", "2", "--eval-every", "2", "--checkpoint-every", "0",
        "--device", "cpu", "--threads", "1"])
    assert result.exit_code == 0, result.output
    with (run / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and rows[-1]["step"] == "4" and float(rows[-1]["val_bpb"]) > 0
