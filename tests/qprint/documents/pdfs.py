"""PDFs written byte by byte for the document tests: real files of chosen page sizes with black
boxes at known places, and hostile ones (a decompression bomb, 20,000 pages, a 10 m page, a broken
cross-reference table, an encrypted file, garbage).

Sizes are in millimetres; a box is ``(left, top, width, height)`` from the page's top-left corner
as it is displayed (before any ``/Rotate``, which :class:`Page` takes as well).
"""

import hashlib
import struct
import zlib
from dataclasses import dataclass, field

MM = 72 / 25.4  # PDF units per millimetre


@dataclass
class Page:
    width_mm: float
    height_mm: float
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    rotate: int = 0
    #: ``(left, baseline from the top, size in points, text)`` in Helvetica
    texts: list[tuple[float, float, float, str]] = field(default_factory=list)

    def content(self) -> bytes:
        ops = [b"0 0 0 rg"]
        for left, top, width, height in self.boxes:
            bottom = self.height_mm - top - height
            ops.append(
                b"%.3f %.3f %.3f %.3f re f" % (left * MM, bottom * MM, width * MM, height * MM)
            )
        for left, baseline, size, text in self.texts:
            escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(
                b"BT /F1 %.1f Tf %.3f %.3f Td (%s) Tj ET"
                % (size, left * MM, (self.height_mm - baseline) * MM, escaped.encode("latin-1"))
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
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for page in pages:
        objects.append(stream(page.content()))
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %.3f %.3f] /Rotate %d /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>"
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


def shipping_label() -> Page:
    """A 4 x 6 in shipping label: frames, addresses, a barcode."""
    bars = [(8 + i * 1.3, 100, 0.6 if i % 3 else 1.0, 22) for i in range(60)]
    frames = [(4, 4, 93.6, 0.8), (4, 40, 93.6, 0.8), (4, 95, 93.6, 0.8), (4, 130, 93.6, 0.8)]
    return Page(
        101.6,
        152.4,
        frames + bars + [(70, 8, 26, 28)],
        texts=[
            (6, 11, 8, "FROM: Acme Printing Ltd"),
            (6, 16, 8, "1 Harbour Road, Leith EH6 6AA"),
            (6, 50, 11, "SHIP TO:"),
            (6, 60, 16, "Ada Lovelace"),
            (6, 69, 12, "12 St James's Square"),
            (6, 77, 12, "London SW1Y 4JH"),
            (6, 140, 9, "qprint-4x6 label  order 42-1187"),
        ],
    )


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


def zeros_deflate(prefix: bytes, chunks: int, chunk_size: int = 1 << 20) -> bytes:
    """A zlib stream of ``prefix`` then ``chunks`` × ``chunk_size`` zero bytes, made without
    compressing them all: after a full flush deflate forgets what came before, so one compressed
    chunk repeats; the checksum of zeros is computed (Adler-32: ``a`` stays, ``b`` grows by
    ``a`` per byte)."""
    compressor = zlib.compressobj(9)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(bytes(chunk_size)) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.flush(zlib.Z_FINISH)
    adler = zlib.adler32(prefix)
    low, high = adler & 0xFFFF, adler >> 16
    high = (high + chunks * chunk_size * low) % 65521
    return head + block * chunks + tail[:-4] + struct.pack(">I", (high << 16) | low)


def decompression_bomb(inflated_bytes: int = 2 << 30) -> bytes:
    """An A4 page whose one image, a few megabytes of Flate data, inflates to ``inflated_bytes``
    of pixels (a 2 GiB picture by default), drawn over the whole page."""
    side = int((inflated_bytes / 3) ** 0.5)
    chunks = -(-side * side * 3 // (1 << 20))  # whole chunks: a little more than the picture
    image = stream(
        zeros_deflate(b"", chunks),
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
    """An A4 page whose content stream inflates to ``inflated_bytes``: one box, then NUL bytes
    (white space to a PDF parser)."""
    data = zeros_deflate(b"0 0 0 rg 10 10 50 50 re f ", inflated_bytes >> 20)
    content = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data)
    content += data + b"\nendstream"
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
