"""The report as data: sections of paragraphs, bullet lists, tables and images.

Sections are built once and rendered twice (Markdown and HTML), so the two files always say
the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Image:
    """A plot: written as ``filename`` next to report.md, embedded as a data URI in HTML."""

    filename: str
    png: bytes
    alt: str


Block = Paragraph | Bullets | Table | Image


@dataclass(frozen=True)
class Section:
    title: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Document:
    """``refresh_s`` is set on a report written mid-campaign: the HTML page reloads itself."""

    title: str
    sections: tuple[Section, ...]
    refresh_s: int | None = None

    def images(self) -> list[Image]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Image)]
