"""PDFs written byte by byte for the document tests: real files of chosen page sizes with black
boxes at known places, and hostile ones (a decompression bomb, 20,000 pages, a 10 m page, a broken
cross-reference table, an encrypted file, garbage).

Sizes are in millimetres; a box is ``(left, top, width, height)`` from the page's top-left corner
as it is displayed (before any ``/Rotate``, which :class:`Page` takes as well).
"""

import hashlib
import io
import zlib
from dataclasses import dataclass, field

MM = 72 / 25.4  # PDF units per millimetre


@dataclass
class Page:
    width_mm: float
    height_mm: float
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    rotate: int = 0

    def content(self) -> bytes:
        ops = [b"0 0 0 rg"]
        for left, top, width, height in self.boxes:
            bottom = self.height_mm - top - height
            ops.append(
                b"%.3f %.3f %.3f %.3f re f" % (left * MM, bottom * MM, width * MM, height * MM)
            )
        return b"\n".join(ops)


def write(objects: list[bytes], *, trailer: bytes = b"", shift_xref: int = 0) -> bytes:
    """A PDF of ``objects`` (object 1 is the catalog) with a correct cross-reference table
    (each offset moved by ``shift_xref`` bytes: a broken table)."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % (offset + shift_xref)
    out += b"trailer\n<< /Size %d /Root 1 0 R " % (len(objects) + 1) + trailer + b">>\n"
    out += b"startxref\n%d\n%%%%EOF\n" % (xref + shift_xref)
    return bytes(out)


def stream(data: bytes, *, compress: bool = True, extra: bytes = b"") -> bytes:
    if compress:
        data = zlib.compress(data, 9)
        extra += b" /Filter /FlateDecode"
    return b"<< /Length %d%s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"


def pdf(pages: list[Page], *, shift_xref: int = 0, trailer: bytes = b"") -> bytes:
    objects: list[bytes] = [b"", b""]  # catalog, page tree
    kids = []
    for page in pages:
        objects.append(stream(page.content()))
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %.3f %.3f] /Rotate %d /Contents %d 0 R >>"
            % (page.width_mm * MM, page.height_mm * MM, page.rotate, content)
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids),
        len(kids),
    )
    return write(objects, shift_xref=shift_xref, trailer=trailer)


def a4(*boxes, rotate: int = 0) -> Page:
    return Page(210, 297, list(boxes), rotate)


def many_pages(count: int, width_mm: float = 210, height_mm: float = 297) -> bytes:
    """``count`` pages sharing one content stream (a small file of very many pages)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", stream(b"0 0 0 rg")]
    kids = []
    for _ in range(count):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %.3f %.3f] /Contents 3 0 R >>"
            % (width_mm * MM, height_mm * MM)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids),
        count,
    )
    return write(objects)


def decompression_bomb(inflated_bytes: int = 2 << 30) -> bytes:
    """An A4 page whose one image, a few megabytes of Flate data, inflates to ``inflated_bytes``
    of pixels (a 2 GiB picture by default), drawn over the whole page."""
    side = int((inflated_bytes / 3) ** 0.5)
    compressor = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    data = io.BytesIO()
    left = side * side * 3
    while left > 0:
        data.write(compressor.compress(chunk[: min(left, len(chunk))]))
        left -= len(chunk)
    data.write(compressor.flush())
    image = stream(
        data.getvalue(),
        compress=False,
        extra=b" /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB"
        b" /BitsPerComponent 8 /Filter /FlateDecode" % (side, side),
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R"
        b" /Resources << /XObject << /Im 5 0 R >> >> >>",
        stream(b"q 595 0 0 842 0 0 cm /Im Do Q"),
        image,
    ]
    return write(objects)


def content_bomb(inflated_bytes: int = 1 << 30) -> bytes:
    """An A4 page whose content stream inflates to ``inflated_bytes`` (spaces around one box)."""
    compressor = zlib.compressobj(9)
    data = io.BytesIO()
    data.write(compressor.compress(b"0 0 0 rg 10 10 50 50 re f "))
    chunk = b" " * (1 << 20)
    for _ in range(inflated_bytes >> 20):
        data.write(compressor.compress(chunk))
    data.write(compressor.flush())
    content = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data.getvalue())
    content += data.getvalue() + b"\nendstream"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R >>",
        content,
    ]
    return write(objects)


def encrypted() -> bytes:
    """A PDF under the standard security handler (RC4, revision 2) whose user password is not
    empty: nothing opens it without the password."""
    file_id = hashlib.md5(b"qprint-test").hexdigest().encode()
    owner = hashlib.sha256(b"owner").hexdigest()[:64].encode()
    user = hashlib.sha256(b"user").hexdigest()[:64].encode()
    trailer = b"/Encrypt 4 0 R /ID [<%s> <%s>] " % (file_id, file_id)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] >>",
        b"<< /Filter /Standard /V 1 /R 2 /Length 40 /P -4 /O <%s> /U <%s> >>" % (owner, user),
    ]
    return write(objects, trailer=trailer)


def garbage() -> bytes:
    """Starts as a PDF, is none: its header and then noise."""
    return b"%PDF-1.7\n" + hashlib.sha512(b"noise").digest() * 64
