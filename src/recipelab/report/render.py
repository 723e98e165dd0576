"""Markdown and self-contained HTML from a :class:`Document`.

The HTML embeds every image as a base64 ``data:`` URI and carries its own small stylesheet:
it opens from a USB stick, an e-mail attachment or an air-gapped box, with no network.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from recipelab.fsutil import atomic_write_bytes, atomic_write_text
from recipelab.report.document import Block, Bullets, Document, Paragraph, Table

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; height: auto; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; margin-top: 2rem; }
"""


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Table):
        lines = ["| " + " | ".join(_md_cell(h) for h in block.headers) + " |",
                 "|" + "|".join("---" for _ in block.headers) + "|"]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
        return "\n".join(lines)
    return f"![{block.alt}]({block.filename})"


def to_markdown(document: Document) -> str:
    parts = [f"# {document.title}"]
    for section in document.sections:
        parts.append(f"## {section.title}")
        parts.extend(_markdown_block(block) for block in section.blocks)
    return "\n\n".join(parts) + "\n"


def _html_block(block: Block) -> str:
    esc = html.escape
    if isinstance(block, Paragraph):
        return f"<p>{esc(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{esc(item)}</li>" for item in block.items) + "</ul>"
    if isinstance(block, Table):
        head = "".join(f"<th>{esc(h)}</th>" for h in block.headers)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                       for row in block.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    data = base64.b64encode(block.png).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{esc(block.alt)}"></figure>'


def to_html(document: Document) -> str:
    body = [f"<h1>{html.escape(document.title)}</h1>"]
    for section in document.sections:
        body.append(f"<section><h2>{html.escape(section.title)}</h2>")
        body.extend(_html_block(block) for block in section.blocks)
        body.append("</section>")
    refresh = (f'<meta http-equiv="refresh" content="{document.refresh_s}">'
               if document.refresh_s else "")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">" + refresh +
            f"<title>{html.escape(document.title)}</title><style>{STYLE}</style></head>"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_document(document: Document, out_dir: Path) -> tuple[Path, Path]:
    """Write report.md with its PNGs next to it, and report.html; returns both paths.

    PNGs from an earlier report that this one no longer has are removed, so the folder
    never shows a stale plot; every file is replaced atomically, since ``recipelab report``
    may run while the campaign writes its own.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    current = {image.filename for image in document.images()}
    for stale in out_dir.glob("*.png"):
        if stale.name not in current:
            stale.unlink()
    for image in document.images():
        atomic_write_bytes(out_dir / image.filename, image.png)
    markdown, page = out_dir / "report.md", out_dir / "report.html"
    atomic_write_text(markdown, to_markdown(document))
    atomic_write_text(page, to_html(document))
    return markdown, page


