"""Job options, checked and mapped for ``lp -o`` and for IPP. Pure: no I/O.

A job's ``options`` (docs/API.md) may carry ``copies``, ``sides`` (or ``duplex``), ``media``,
``page_ranges``, ``orientation``, ``color`` and ``fit`` (``"scale"``: the printer scales the
document to its media, CUPS ``fit-to-page`` / IPP ``print-scaling=fit``; docs/DOCUMENTS.md).
``normalize`` turns them into ``JobOptions`` or raises ``OptionError`` naming the option;
``check`` refuses an option the printer's reported capabilities say it cannot do. Both happen
before anything is sent to a printer, so a job with an option the printer cannot honour fails
instead of printing something else.

Capabilities (what the agent reports for a printer, and what ``check`` reads) use these keys:
``media`` (list of media names), ``sides`` (list of IPP ``sides`` keywords), ``color`` (bool),
``color_modes`` (IPP ``print-color-mode`` keywords), ``document_formats`` (MIME types),
``copies_max`` (int), ``page_ranges`` (bool), ``orientations`` (names below). A key that is
absent means "not known": nothing is refused on its account.
"""

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

SIDES = ("one-sided", "two-sided-long-edge", "two-sided-short-edge")
_DUPLEX = {
    True: "two-sided-long-edge",
    False: "one-sided",
    "long-edge": "two-sided-long-edge",
    "short-edge": "two-sided-short-edge",
    "none": "one-sided",
    "simplex": "one-sided",
}
# IPP orientation-requested enum values (RFC 8011 5.2.10).
ORIENTATIONS = {"portrait": 3, "landscape": 4, "reverse-landscape": 5, "reverse-portrait": 6}
COLORS = {"color": "color", "monochrome": "monochrome", "grayscale": "monochrome"}
KNOWN = frozenset(
    {"copies", "sides", "duplex", "media", "page_ranges", "orientation", "color", "fit"}
)
FITS = ("scale",)
_MEDIA = re.compile(r"[\w.-]{1,100}")
_RANGE = re.compile(r"^\s*([0-9]{1,9})\s*(?:-\s*([0-9]{1,9})\s*)?$")


def _shown(value: Any) -> str:
    """``value`` as a refusal quotes it, cut short: what a client sent may be long."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class OptionError(ValueError):
    """An option is malformed or the printer cannot do it; the message names the option."""

    def __init__(self, option: str, message: str):
        super().__init__(f"option '{option}': {message}")
        self.option = option


def _one_of(name: str, value: Any, choices: Collection[str], expected: str = "") -> Any:
    """``value``, when it is absent (``None``) or one of ``choices``, a string; an
    :class:`OptionError` otherwise, saying what was ``expected`` (by default, the choices)."""
    if value is not None and not (isinstance(value, str) and value in choices):
        expected = expected or f"one of {', '.join(choices)}"
        raise OptionError(name, f"expected {expected}, got {_shown(value)}")
    return value


@dataclass(frozen=True)
class JobOptions:
    copies: int = 1
    sides: str | None = None
    media: str | None = None
    page_ranges: tuple[tuple[int, int], ...] = ()
    orientation: str | None = None
    color: str | None = None  # IPP print-color-mode: "color" or "monochrome"
    fit: str | None = None  # "scale": scale the document to the media

    @property
    def plain(self) -> bool:
        """True when nothing beyond one copy as the document says was asked for."""
        return self == JobOptions()

    def asked(self) -> list[str]:
        """The options that differ from the defaults, by their option names."""
        names = []
        if self.copies != 1:
            names.append("copies")
        for name in ("sides", "media", "page_ranges", "orientation", "color", "fit"):
            if getattr(self, name):
                names.append(name)
        return names


def _page_ranges(value: Any) -> tuple[tuple[int, int], ...]:
    parts: list[Any]
    if isinstance(value, str):
        parts = [p for p in value.split(",") if p.strip()]
    elif isinstance(value, list):
        parts = value
    else:
        raise OptionError("page_ranges", f"expected '1-3,5' or a list, got {_shown(value)}")
    ranges = []
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            first, last = part, part
        elif isinstance(part, list) and len(part) == 2 and all(isinstance(n, int) for n in part):
            first, last = part
        elif isinstance(part, str) and (match := _RANGE.match(part)):
            first = int(match.group(1))
            last = int(match.group(2) or first)
        else:
            raise OptionError("page_ranges", f"bad range {_shown(part)}")
        if first < 1 or last < first:
            raise OptionError("page_ranges", f"bad range {_shown(part)}")
        ranges.append((first, last))
    if not ranges:
        raise OptionError("page_ranges", "no page range given")
    return tuple(ranges)


def normalize(options: dict[str, Any] | None) -> JobOptions:
    """Check a job's options and return them in one shape; unknown keys are left alone."""
    options = options or {}
    copies = options.get("copies", 1)
    if copies is None:
        copies = 1
    if not isinstance(copies, int) or isinstance(copies, bool) or not 1 <= copies <= 9999:
        raise OptionError("copies", f"expected an integer from 1 to 9999, got {_shown(copies)}")
    sides = options.get("sides")
    if sides is None and "duplex" in options and options["duplex"] is not None:
        duplex = options["duplex"]
        if isinstance(duplex, str):
            duplex = duplex.lower()
        if not isinstance(duplex, bool | str) or duplex not in _DUPLEX:
            raise OptionError(
                "duplex", f"expected true, false, 'long-edge' or 'short-edge', got {_shown(duplex)}"
            )
        sides = _DUPLEX[duplex]
    _one_of("sides", sides, SIDES)
    media = options.get("media")
    if media is not None and not (isinstance(media, str) and _MEDIA.fullmatch(media)):
        raise OptionError(
            "media", f"expected a media name such as iso_a4_210x297mm, got {_shown(media)}"
        )
    ranges = _page_ranges(options["page_ranges"]) if options.get("page_ranges") else ()
    orientation = _one_of("orientation", options.get("orientation"), ORIENTATIONS)
    color = options.get("color")
    if isinstance(color, bool):
        color = "color" if color else "monochrome"
    _one_of("color", color, COLORS, "true, false, 'color' or 'monochrome'")
    fit = _one_of("fit", options.get("fit"), FITS, "'scale' (or no fit)")
    return JobOptions(
        copies=copies,
        sides=sides,
        media=media or None,
        page_ranges=ranges,
        orientation=orientation,
        color=COLORS[color] if color else None,
        fit=fit,
    )


def _listed(caps: dict[str, Any], key: str) -> list[str] | None:
    """The capability ``key`` when it is a list that says something, as strings: what a device
    reported is whatever JSON it sent."""
    value = caps.get(key)
    return [str(item) for item in value] if isinstance(value, list) and value else None


def check(options: JobOptions, capabilities: dict[str, Any], printer: str) -> None:
    """Raise ``OptionError`` when the printer's capabilities say it cannot do an option."""
    caps = capabilities or {}

    def refuse(option: str, value: Any, supported: Any) -> None:
        raise OptionError(
            option, f"printer '{printer}' cannot do {value!r} (it supports: {supported})"
        )

    copies_max = caps.get("copies_max")
    if isinstance(copies_max, int) and options.copies > copies_max:
        refuse("copies", options.copies, f"1 to {copies_max}")
    sides = _listed(caps, "sides")
    if sides and options.sides not in (None, "one-sided", *sides):
        refuse("sides", options.sides, ", ".join(sides))
    media = _listed(caps, "media")
    if media and options.media and options.media not in media:
        refuse("media", options.media, ", ".join(media[:20]))
    if options.color == "color" and caps.get("color") is False:
        refuse("color", "color", "monochrome only")
    if options.page_ranges and caps.get("page_ranges") is False:
        refuse("page_ranges", _ranges_text(options.page_ranges), "no page ranges")
    orientations = _listed(caps, "orientations")
    if orientations and options.orientation and options.orientation not in orientations:
        refuse("orientation", options.orientation, ", ".join(orientations))


def check_format(content_type: str, capabilities: dict[str, Any], printer: str) -> None:
    formats = _listed(capabilities or {}, "document_formats") or ["application/octet-stream"]
    base = content_type.split(";", 1)[0].strip().lower()
    if base not in formats and "application/octet-stream" not in formats:
        raise OptionError(
            "content_type",
            f"printer '{printer}' does not take {base} (it takes: {', '.join(formats)})",
        )


def _ranges_text(ranges: tuple[tuple[int, int], ...], always_pairs: bool = False) -> str:
    return ",".join(f"{a}-{b}" if a != b or always_pairs else str(a) for a, b in ranges)


def lp_arguments(options: JobOptions) -> list[str]:
    """The ``lp`` arguments for these options (CUPS maps them to the queue's driver)."""
    args: list[str] = []
    if options.copies > 1:
        args += ["-n", str(options.copies)]
    if options.sides:
        args += ["-o", f"sides={options.sides}"]
    if options.media:
        args += ["-o", f"media={options.media}"]
    if options.page_ranges:
        args += ["-P", _ranges_text(options.page_ranges)]
    if options.orientation:
        args += ["-o", f"orientation-requested={ORIENTATIONS[options.orientation]}"]
    if options.color:
        args += ["-o", f"print-color-mode={options.color}"]
    if options.fit == "scale":
        args += ["-o", "fit-to-page"]
    return args


def ipp_attributes(options: JobOptions) -> list[tuple[str, str, str]]:
    """Job template attributes as ``(value tag, name, value)`` for an ipptool ``ATTR`` line."""
    attrs: list[tuple[str, str, str]] = []
    if options.copies > 1:
        attrs.append(("integer", "copies", str(options.copies)))
    if options.sides:
        attrs.append(("keyword", "sides", options.sides))
    if options.media:
        attrs.append(("keyword", "media", options.media))
    if options.page_ranges:
        attrs.append(
            ("rangeOfInteger", "page-ranges", _ranges_text(options.page_ranges, always_pairs=True))
        )
    if options.orientation:
        attrs.append(("enum", "orientation-requested", str(ORIENTATIONS[options.orientation])))
    if options.color:
        attrs.append(("keyword", "print-color-mode", options.color))
    if options.fit == "scale":
        attrs.append(("keyword", "print-scaling", "fit"))
    return attrs
