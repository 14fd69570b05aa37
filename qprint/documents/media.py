"""Does the document fit the printer? A PDF's page sizes against the media its printer reported.

The agent reports each printer's media (capabilities ``media``) as IPP and CUPS name them: PWG
5101.1 self-describing names, ``class_size-name_WIDTHxHEIGHTunit`` (``iso_a4_210x297mm``,
``na_letter_8.5x11in``, ``oe_4x6-label_4x6in``), and ranges for custom sizes and rolls
(``custom_min_…``/``custom_max_…``, ``roll_min_…``/``roll_max_…``). The size is read from the name;
a name without one (``auto``, a legacy ``Letter``) is left out.

:func:`check_fit` (the submission's and the reprint's one call, docs/DOCUMENTS.md "Fit"): when no
page size of the PDF fits any reported medium, within ``TOLERANCE_MM`` and in either orientation,
the job is refused 422 ``media_mismatch`` with a message naming both sides, unless its options ask
the printer to scale (``"fit": "scale"``). A printer that reported no media, and a document whose
page sizes cannot be read, pass unchecked: what the job's QUEUED event says
(:class:`FitNote`). Only PDFs are checked: an image has no page size of its own, and raw printer
languages are laid out by the printer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qprint.core.errors import Invalid
from qprint.documents import render
from qprint.documents.worker import PDF_TYPES

TOLERANCE_MM = 2.0
MM_PER_INCH = 25.4
MM_PER_POINT = MM_PER_INCH / 72

_SIZE = re.compile(r"_(\d+(?:\.\d+)?)x(\d+(?:\.\d+)?)(mm|in)$")

#: Common sizes, for messages a person reads ("210 × 297 mm (A4)").
NAMED_SIZES: tuple[tuple[str, float, float], ...] = (
    ("A3", 297, 420),
    ("A4", 210, 297),
    ("A5", 148, 210),
    ("A6", 105, 148),
    ("B5", 176, 250),
    ("Letter", 215.9, 279.4),
    ("Legal", 215.9, 355.6),
    ("Tabloid", 279.4, 431.8),
    ("Executive", 184.15, 266.7),
    ("4 × 6 in", 101.6, 152.4),
    ("4 × 4 in", 101.6, 101.6),
    ("DL envelope", 110, 220),
    ("C5 envelope", 162, 229),
)


class MediaMismatch(Invalid):
    """No page of the document fits any medium its printer reported (HTTP 422)."""

    code = "media_mismatch"
    default_message = "The document's page size does not fit the printer's media."


@dataclass(frozen=True)
class Medium:
    """A reported medium: a fixed size, or a range of sizes (custom sizes, a roll)."""

    name: str
    min_mm: tuple[float, float]
    max_mm: tuple[float, float]
    unit: str  # "mm" or "in": how the name gave the size, and how a message says it

    @property
    def is_range(self) -> bool:
        return self.min_mm != self.max_mm

    def fits(self, width_mm: float, height_mm: float, tolerance: float = TOLERANCE_MM) -> bool:
        def within(w: float, h: float) -> bool:
            return (
                self.min_mm[0] - tolerance <= w <= self.max_mm[0] + tolerance
                and self.min_mm[1] - tolerance <= h <= self.max_mm[1] + tolerance
            )

        return within(width_mm, height_mm) or within(height_mm, width_mm)

    def describe(self) -> str:
        """``A4 (210 × 297 mm)``, ``4 × 6 in labels``, ``80 mm rolls up to 3276.7 mm long``."""
        size_name = self.name.split("_")[1] if self.name.count("_") >= 2 else ""
        if self.is_range:
            width = _length(self.max_mm[0], self.unit)
            if self.min_mm[0] == self.max_mm[0]:
                return f"{width} {self.kind()}s up to {_length(self.max_mm[1], self.unit)} long"
            low = _dimensions(*self.min_mm, self.unit)
            return f"custom sizes from {low} to {_dimensions(*self.max_mm, self.unit)}"
        dimensions = _dimensions(*self.min_mm, self.unit)
        if "label" in size_name:
            return f"{dimensions} labels"
        named = name_of(*self.min_mm)
        if named and named != dimensions:
            return f"{named} ({dimensions})"
        return dimensions

    def kind(self) -> str:
        return "roll" if self.name.startswith("roll_") else "custom size"


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _length(mm: float, unit: str) -> str:
    return f"{_number(mm / MM_PER_INCH)} in" if unit == "in" else f"{_number(mm)} mm"


def _dimensions(width_mm: float, height_mm: float, unit: str = "mm") -> str:
    if unit == "in":
        return f"{_number(width_mm / MM_PER_INCH)} × {_number(height_mm / MM_PER_INCH)} in"
    return f"{_number(width_mm)} × {_number(height_mm)} mm"


def name_of(width_mm: float, height_mm: float) -> str | None:
    """The common name of a size (either orientation, within the tolerance), or None."""
    for name, w, h in NAMED_SIZES:
        for a, b in ((w, h), (h, w)):
            if abs(width_mm - a) <= TOLERANCE_MM and abs(height_mm - b) <= TOLERANCE_MM:
                return name + (" landscape" if a > b else "")
    return None


def describe_page(width_mm: float, height_mm: float) -> str:
    """``210 × 297 mm (A4)``."""
    named = name_of(width_mm, height_mm)
    dimensions = _dimensions(round(width_mm, 1), round(height_mm, 1))
    return f"{dimensions} ({named})" if named else dimensions


def parse_medium(name: str) -> tuple[str, str, float, float, str] | None:
    """``(class, size name, width mm, height mm, unit)`` of a self-describing media name; None
    when the name carries no size."""
    match = _SIZE.search(name)
    if not match or name.count("_") < 2:
        return None
    width, height, unit = float(match.group(1)), float(match.group(2)), match.group(3)
    factor = MM_PER_INCH if unit == "in" else 1.0
    media_class, _, rest = name.partition("_")
    size_name = rest[: -len(match.group(0))] if rest.endswith(match.group(0)) else rest
    return media_class, size_name, width * factor, height * factor, unit


def media_of(names: Iterable[Any]) -> list[Medium]:
    """The reported names as :class:`Medium` s: fixed sizes, and one range per
    ``custom_min``/``custom_max`` (or ``roll_min``/``roll_max``) pair. Names without a size, and
    a ``…_max`` without its ``…_min`` (taken from zero), are handled; unknown ones are left out."""
    fixed: list[Medium] = []
    bounds: dict[str, dict[str, tuple[float, float, str, str]]] = {}
    for name in names:
        if not isinstance(name, str):
            continue
        parsed = parse_medium(name)
        if parsed is None:
            continue
        media_class, size_name, width, height, unit = parsed
        if media_class in ("custom", "roll") and size_name in ("min", "max", "current"):
            if size_name != "current":
                bounds.setdefault(media_class, {})[size_name] = (width, height, unit, name)
            continue
        if width <= 0 or height <= 0:
            continue
        fixed.append(Medium(name, (width, height), (width, height), unit))
    ranges = []
    for _class, ends in sorted(bounds.items()):
        if "max" not in ends:
            continue
        max_w, max_h, unit, name = ends["max"]
        min_w, min_h, *_ = ends.get("min", (0.0, 0.0, unit, name))
        if _class == "roll":  # a receipt roll is cut where the document ends: any length up to max
            min_h = 0.0
        ranges.append(Medium(name, (min_w, min_h), (max_w, max_h), unit))
    return fixed + ranges


def describe_media(media: list[Medium], most: int = 4) -> str:
    """``A4 (210 × 297 mm), Letter (8.5 × 11 in) and 3 more``."""
    texts = list(dict.fromkeys(medium.describe() for medium in media))
    if len(texts) == 1:
        return texts[0]
    shown = texts[:most]
    more = len(texts) - len(shown)
    if more:
        return f"{', '.join(shown)} and {more} more"
    return f"{', '.join(shown[:-1])} and {shown[-1]}"


@dataclass(frozen=True)
class FitNote:
    """What the check says for the job's QUEUED event: ``detail["fit"]`` is ``"fits"``,
    ``"scale"`` or ``"unchecked"`` (``{}``: not checked, not a PDF); ``message`` is for a
    person (empty when it fits)."""

    message: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


def check_fit(
    reported: tuple[str, dict[str, Any]] | None,
    content: bytes,
    content_type: str,
    options: dict[str, Any] | None,
) -> FitNote:
    """Check the document's page sizes against the media of the target printer.

    ``reported``: the printer's name and capabilities as its agent reported them (``None``: the
    agent reported no such printer). Raises :class:`MediaMismatch` (422 ``media_mismatch``) when
    no page fits any medium and ``options["fit"]`` is not ``"scale"``.
    """
    if render.base_type(content_type) not in PDF_TYPES:
        return FitNote()
    name = reported[0] if reported else None
    printer = f"printer `{name}`" if name else "the device's default printer"
    names = (reported[1] or {}).get("media") if reported else None
    media = media_of(names) if isinstance(names, list) else []
    if not media:
        said = "reported no media" if not names else "reported no media of a known size"
        return FitNote(
            f"{printer[0].upper()}{printer[1:]} {said}: the document's page size was not checked.",
            {"fit": "unchecked", "reason": "no_media"},
        )
    try:
        sizes = render.page_sizes(content, content_type)
    except render.RenderRefused as exc:
        return FitNote(
            f"The document's page sizes could not be read ({exc.message}): they were not "
            f"checked against the media of {printer}.",
            {"fit": "unchecked", "reason": exc.code},
        )
    pages = list(dict.fromkeys((w * MM_PER_POINT, h * MM_PER_POINT) for w, h in sizes))
    for width, height in pages:
        for medium in media:
            if medium.fits(width, height):
                return FitNote("", {"fit": "fits", "media": medium.name})
    shown = [describe_page(w, h) for w, h in pages[:3]]
    more = f" and {len(pages) - 3} more sizes" if len(pages) > 3 else ""
    document = (
        f"the document is {shown[0]}"
        if len(shown) == 1
        else f"the document's pages are {', '.join(shown)}{more}"
    )
    text = f"{document}; {printer} has {describe_media(media)}"
    if (options or {}).get("fit") == "scale":
        return FitNote(
            f"{text[0].upper()}{text[1:]}: the printer is asked to scale it (fit: scale).",
            {"fit": "scale", "pages": [list(map(_round, page)) for page in pages[:20]]},
        )
    raise MediaMismatch(
        message=f"{text[0].upper()}{text[1:]}. Send a document of the printer's size, or set "
        'options.fit to "scale" to have the printer scale it.'
    )


def _round(value: float) -> float:
    return round(value, 1)
