"""The report as data (:mod:`recipelab.report.document`): a document of sections, each of
paragraphs, bullet lists, tables and images, built once and rendered twice, so report.md and
report.html say the same thing; its images are the plots written beside the Markdown."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from recipelab.report.document import Bullets, Document, Image, Paragraph, Section, Table
from recipelab.report.render import to_html, write_document

PNG = b"\x89PNG\r\n\x1a\n"  # an image's bytes are carried, never decoded


def plot(name: str) -> Image:
    """An image whose bytes say which plot it is, so a mix-up shows."""
    return Image(f"{name}.png", PNG + name.encode(), f"the {name} plot")


def report(*sections: Section) -> Document:
    return Document("recipelab report: campaign nightly", sections)


def test_images_are_every_plot_of_every_section_in_reading_order() -> None:
    document = report(
        Section("Summary", (Bullets(("winner: p0003",)),)),
        Section("val_bpb by iteration", (Paragraph("Each point is a trial."), plot("val_bpb"))),
        Section("Knob importance", (plot("importance"), Table(("knob", "importance"),
                                                              (("optimizer.lr", "1.000"),)))),
        Section("Energy", (plot("energy"),)))
    assert [image.filename for image in document.images()] == [
        "val_bpb.png", "importance.png", "energy.png"]


def test_a_document_without_plots_has_no_images() -> None:
    assert report().images() == []
    assert report(Section("Stress runs", (Paragraph("No stress runs yet."),))).images() == []


def test_an_image_is_written_beside_the_markdown_and_embedded_in_the_html(tmp_path: Path) -> None:
    document = report(Section("val_bpb by iteration", (plot("val_bpb"),)),
                      Section("Energy", (plot("energy"),)))
    markdown, page = write_document(document, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["energy.png", "val_bpb.png"]
    for image in (plot("val_bpb"), plot("energy")):
        assert (tmp_path / image.filename).read_bytes() == image.png
        assert f"![{image.alt}]({image.filename})" in markdown.read_text()
        assert f'src="data:image/png;base64,{base64.b64encode(image.png).decode()}"' in (
            page.read_text())


def test_a_finished_report_does_not_reload_itself() -> None:
    finished = report(Section("Summary", (Paragraph("done"),)))
    assert finished.refresh_s is None and 'http-equiv="refresh"' not in to_html(finished)
    running = dataclasses.replace(finished, refresh_s=30)
    assert '<meta http-equiv="refresh" content="30">' in to_html(running)


def test_a_document_is_a_value_equal_when_built_from_the_same_data_and_never_changed() -> None:
    """Built once and rendered twice: nothing may change it between the two renderings."""
    def built() -> Document:
        return report(Section("Summary", (Bullets(("a", "b")), Table(("h",), (("c",),)),
                                          plot("val_bpb"))))

    assert built() == built() and hash(built()) == hash(built())
    for value, field in ((built(), "sections"), (built().sections[0], "blocks"),
                         (Paragraph("text"), "text"), (plot("energy"), "png")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, ())
