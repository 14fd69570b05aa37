"""Rendered pages stacked into one PNG, for a printer that takes one image per job (a receipt has
no page breaks). Pure: done on the PNG data itself, so no image library runs in the node's own
process (the renderer, :mod:`qprint.documents.render`, draws each page in its worker).
"""

import struct
import zlib


def stacked(pages: list[bytes]) -> bytes:
    """One-bit PNG pages of one width, one under the other (a receipt has no page breaks).

    Done on the PNG data itself (the renderer's pages are 1-bit greyscale, not interlaced), so no
    image library runs in the node's own process: each page's rows are unfiltered and the whole is
    written again with filter 0."""
    rows: list[bytes] = []
    width = 0
    for page in pages:
        page_width, page_rows = png_rows(page)
        if width and page_width != width:
            raise ValueError("pages of different widths")
        width = page_width
        rows.extend(page_rows)
    raw = b"".join(b"\x00" + row for row in rows)
    header = struct.pack(">IIBBBBB", width, len(rows), 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_rows(png: bytes) -> tuple[int, list[bytes]]:
    """The width and the unfiltered rows of a 1-bit greyscale PNG."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    at, data, width, height = 8, b"", 0, 0
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if (depth, color, interlace) != (1, 0, 0):
                raise ValueError("not a 1-bit greyscale PNG")
        elif kind == b"IDAT":
            data += body
        at += 12 + length
    raw = zlib.decompress(data)
    stride = (width + 7) // 8
    rows, previous = [], bytes(stride)
    for n in range(height):
        line = raw[n * (stride + 1) : (n + 1) * (stride + 1)]
        row = _unfilter(line[0], bytearray(line[1:]), previous)
        rows.append(row)
        previous = row
    return width, rows


def _unfilter(kind: int, row: bytearray, up: bytes) -> bytes:
    """PNG filter types 0-4 undone, for one byte per pixel unit (bit depth 1)."""
    for i in range(len(row)):
        left = row[i - 1] if i else 0
        above = up[i]
        corner = up[i - 1] if i else 0
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 2:
            row[i] = (row[i] + above) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + ((left + above) >> 1)) & 0xFF
        elif kind == 4:
            p = left + above - corner
            pa, pb, pc = abs(p - left), abs(p - above), abs(p - corner)
            pred = left if pa <= pb and pa <= pc else above if pb <= pc else corner
            row[i] = (row[i] + pred) & 0xFF
    return bytes(row)
