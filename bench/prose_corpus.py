"""Write a second text corpus for the transfer bench: English prose, not code.

``bench/transfer.py`` ranks and predicts on ``python-source``; its rules must hold on text of
another kind too, and the longest arm must read that text once (a corpus read twice scores the
second pass on memorised text). Python ships prose beside its source: every docstring of the
standard library (tests and the IDE left out) and the reference manual's topics
(``pydoc_data.topics``, the ``python-docs`` corpus). This script writes them, in a fixed
order, to one ``.txt`` file that ``recipelab run --corpus FILE`` reads.

    python bench/prose_corpus.py --out DIR/prose.txt
    python bench/transfer.py --corpus DIR/prose.txt --out DIR
"""

from __future__ import annotations

import argparse
import ast
import pydoc_data.topics
import sysconfig
from collections.abc import Iterator
from pathlib import Path

MIN_CHARS = 80
"""Shorter docstrings are mostly one-line labels ("Return the size."), not prose."""
LEFT_OUT = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"})
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstrings(root: Path) -> Iterator[str]:
    """Every docstring of at least :data:`MIN_CHARS` under ``root``, file by file in path order."""
    for path in sorted(root.rglob("*.py")):
        if LEFT_OUT.intersection(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # a file the running Python cannot parse (lib2to3's fixtures)
        for node in ast.walk(tree):
            text = ast.get_docstring(node) if isinstance(node, DOCUMENTED) else None
            if text and len(text) >= MIN_CHARS:
                yield text


def prose() -> Iterator[str]:
    yield from docstrings(Path(sysconfig.get_paths()["stdlib"]))
    for _, text in sorted(pydoc_data.topics.topics.items()):
        yield text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("prose.txt"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(prose())
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(text.encode()):,} bytes of the standard library's prose")


if __name__ == "__main__":
    main()
