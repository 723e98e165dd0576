"""Tokenizers: bytes, a byte-level BPE trained and cached per text, and the bytes each token
stands for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer as HFModel

from recipelab.trainer.spec import DataError
from recipelab.trainer.tokenizer import ENCODE_CHUNK_CHARS, bpe_tokenizer, byte_tokenizer
from tests.trainer.text_samples import prose


def test_the_byte_tokenizer_encodes_utf8_bytes_and_every_token_is_one_byte() -> None:
    tok = byte_tokenizer()
    ids = tok.encode("é🙂a")
    assert ids.dtype == np.int32
    assert ids.tolist() == list("é🙂a".encode())
    assert tok.name == "byte" and tok.vocab_size == 256
    assert tok.token_bytes.dtype == np.int64 and (tok.token_bytes == 1).all()
    assert tok.decode(ids) == "é🙂a"


def test_bpe_round_trips_non_ascii_text_and_token_bytes_sum_to_its_utf8_length(
        tmp_path: Path) -> None:
    tok = bpe_tokenizer(prose(300), 400, tmp_path)
    text = prose(20, seed=99) + "unseen: ñ 𝄞 \x00 \t end"
    ids = tok.encode(text)
    assert tok.name == "bpe-400" and ids.dtype == np.int32
    assert tok.decode(ids) == text
    assert int(tok.token_bytes[ids].sum()) == len(text.encode())
    assert len(ids) < len(text.encode()), "merges were learned"


def test_bpe_reports_the_requested_vocab_size_even_when_fewer_merges_are_learned(
        tmp_path: Path) -> None:
    tok = bpe_tokenizer("tiny tiny text\n", 4096, tmp_path)
    assert tok.vocab_size == 4096 and tok.token_bytes.shape == (4096,)
    assert tok.encode("any text at all: ☃").max() < 300


def test_a_second_bpe_call_on_the_same_text_loads_the_cached_json_instead_of_training(
        tmp_path: Path) -> None:
    text = prose(100)
    first = bpe_tokenizer(text, 300, tmp_path)
    [cached] = tmp_path.glob("bpe-300-*.json")
    stamp = cached.stat().st_mtime_ns
    second = bpe_tokenizer(text, 300, tmp_path)
    assert cached.stat().st_mtime_ns == stamp and len(list(tmp_path.iterdir())) == 1
    assert np.array_equal(first.encode(text), second.encode(text))


def test_bpe_encodes_a_long_text_in_chunks_to_exactly_the_ids_of_one_encode_call(
        tmp_path: Path) -> None:
    text = "".join(("    " if i % 3 else "") + line for i, line in
                   enumerate(prose(6000, 5).splitlines(keepends=True)))
    tok = bpe_tokenizer(text, 400, tmp_path)
    [cached] = tmp_path.glob("bpe-*.json")
    whole = HFModel.from_file(str(cached)).encode(text).ids
    assert len(text) > 4 * ENCODE_CHUNK_CHARS
    assert tok.encode(text).tolist() == whole


def test_bpe_needs_a_vocab_of_at_least_one_id_per_byte(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"vocab_size >= 256.*byte tokenizer"):
        bpe_tokenizer("text", 200, tmp_path)
