"""The render worker: a plain Python process that parses and rasterizes documents, so a hostile one
never touches a node's own memory (docs/DOCUMENTS.md, "Bounds").

Started by :mod:`qprint.documents.render` as ``python -m qprint.documents.worker MEMORY_BYTES``. It
imports PDFium (pypdfium2) and Pillow, caps its own address space (``RLIMIT_AS``) at
``MEMORY_BYTES`` and writes no core file, says ``ready``, then answers requests one at a time on
stdin/stdout until stdin closes. Nothing of Django is imported here.

Each request is a JSON header line and the document's bytes (``size`` of them); its ``op`` is
``info`` (the pages and their sizes), ``render`` (one page) or ``strip`` (the first pages one
under the other, one image). Each answer is a JSON header line, then ``size`` bytes of PNG when
the header says ``"ok": true``. Only JSON and raw bytes cross the pipe (never pickle): what a
document made of this process cannot become code in the node. A refusal is ``{"ok": false,
"code", "message"}``; when the process runs out of memory it answers ``too_much_memory`` if it
still can, and exits either way (PDFium aborts on a failed allocation: then the node sees the pipe
close and refuses the document the same way).

The limits a request carries: ``max_pages`` (a document with more pages is refused, whatever page
is asked for), ``max_pixels`` (of the bitmap a page is drawn on, of a strip as a whole, and of a
PNG/JPEG source image) and the page's largest side (14,400 units, 5.08 m at 72 per inch: the
largest page the PDF format itself allows, far beyond any printer).
"""

import io
import json
import math
import os
import sys
from typing import Any, BinaryIO

#: The largest page side (PDF units, 1/72 in) the PDF format allows (ISO 32000-1, annex C).
MAX_PAGE_POINTS = 14400
PDF_TYPES = frozenset({"application/pdf", "application/vnd.cups-pdf"})
IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG"}
MODES = {"rgb": "RGB", "gray": "L", "mono": "1"}


class Refusal(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _pdf(content: bytes, max_pages: int):
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        document = pdfium.PdfDocument(content)
    except pdfium.PdfiumError as exc:
        if exc.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise Refusal(
                "encrypted_document",
                "The PDF is encrypted with a password: it cannot be opened to be shown or checked.",
            ) from None
        raise Refusal("broken_document", "The PDF cannot be read (it is damaged).") from None
    pages = len(document)
    if pages > max_pages:
        document.close()
        raise Refusal(
            "too_many_pages",
            f"The PDF has {pages} pages; documents of more than {max_pages} pages are not "
            "rendered or checked.",
        )
    return document


def _page_size(document, index: int) -> tuple[float, float]:
    import pypdfium2 as pdfium

    try:
        width, height = document.get_page_size(index)
    except pdfium.PdfiumError:
        raise Refusal("broken_document", f"Page {index + 1} of the PDF cannot be read.") from None
    if not (width > 0 and height > 0 and math.isfinite(width) and math.isfinite(height)):
        raise Refusal("broken_document", f"Page {index + 1} of the PDF has no size.")
    if max(width, height) > MAX_PAGE_POINTS:
        raise Refusal(
            "page_too_large",
            f"Page {index + 1} is {width / 72 * 25.4 / 1000:.2f} × "
            f"{height / 72 * 25.4 / 1000:.2f} m, larger than any page a PDF may have (5.08 m).",
        )
    return width, height


def _check_pixels(width: int, height: int, max_pixels: int, what: str) -> None:
    if width * height > max_pixels:
        raise Refusal(
            "too_many_pixels",
            f"{what} would be {width} × {height} pixels, more than the {max_pixels:,} allowed.",
        )


def info(request: dict[str, Any], content: bytes) -> dict[str, Any]:
    """Pages and their sizes (PDF units, as displayed: ``/Rotate`` applied)."""
    if request["content_type"] in IMAGE_TYPES:
        return {"pages": 1, "sizes": []}
    document = _pdf(content, request["max_pages"])
    try:
        sizes = [_page_size(document, index) for index in range(len(document))]
        return {"pages": len(sizes), "sizes": sizes}
    finally:
        document.close()


def _page_height(document, index: int, width: int) -> int:
    """The height in pixels of page ``index`` drawn ``width`` wide."""
    page_width, page_height = _page_size(document, index)
    return max(1, round(page_height * width / page_width))


def _draw(document, index: int, width: int, height: int, mode: str):
    """Page ``index`` as a Pillow image of ``width`` × ``height`` (RGB, or grey for the others)."""
    page_width, _ = _page_size(document, index)
    # A hair under width / page_width, so that PDFium's ceil() of the bitmap's width is
    # exactly ``width`` whatever the rounding of the product.
    scale = (width - 1e-6) / page_width
    page = document[index]
    try:
        bitmap = page.render(
            scale=scale,
            grayscale=mode != "rgb",
            may_draw_forms=False,
            fill_color=(255, 255, 255, 255),
        )
        image = bitmap.to_pil().convert("RGB" if mode == "rgb" else "L")
        # PDFium rounds the height up: a last row of less than half a pixel is cut off.
        return image.crop((0, 0, width, height)) if image.size != (width, height) else image
    finally:
        page.close()


def _pdf_page(request: dict[str, Any], content: bytes):
    document = _pdf(content, request["max_pages"])
    try:
        index, width = request["page"] - 1, request["width"]
        if index >= len(document):
            raise Refusal(
                "no_such_page", f"Page {index + 1} was asked for; the PDF has {len(document)}."
            )
        height = _page_height(document, index, width)
        _check_pixels(width, height, request["max_pixels"], f"Page {index + 1} at {width} wide")
        return _draw(document, index, width, height, request["mode"])
    finally:
        document.close()


def _image(request: dict[str, Any], content: bytes):
    from PIL import Image, UnidentifiedImageError

    expected, max_pixels, width = (
        IMAGE_TYPES[request["content_type"]],
        request["max_pixels"],
        request["width"],
    )
    if request["page"] != 1:
        raise Refusal("no_such_page", f"Page {request['page']} was asked for; an image has 1.")
    Image.MAX_IMAGE_PIXELS = None  # the check below is the bound, with its own message
    try:
        image = Image.open(io.BytesIO(content), formats=[expected])
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise Refusal("broken_document", f"The {expected} image cannot be read.") from None
    _check_pixels(*image.size, max_pixels, "The image")
    source_width, source_height = image.size
    height = max(1, round(source_height * width / source_width))
    _check_pixels(width, height, max_pixels, f"The image at {width} wide")
    if expected == "JPEG":
        image.draft("L" if request["mode"] != "rgb" else "RGB", (width, height))
    try:
        image.load()
    except (OSError, ValueError, SyntaxError):
        raise Refusal("broken_document", f"The {expected} image cannot be read.") from None
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        image = image.convert("RGBA")
        flat = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(flat, image)
    image = image.convert("RGB" if request["mode"] == "rgb" else "L")
    return image.resize((width, height), Image.Resampling.LANCZOS)


def _finished(image, mode: str):
    if mode == "mono":
        return image.convert("1")  # Pillow dithers (Floyd-Steinberg) when it makes 1-bit
    return image


def _png(image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def render(request: dict[str, Any], content: bytes) -> bytes:
    """One page as a PNG ``width`` pixels wide: RGB, grey, or 1-bit (Floyd-Steinberg dithered)."""
    if request["content_type"] in IMAGE_TYPES:
        image = _image(request, content)
    else:
        image = _pdf_page(request, content)
    return _png(_finished(image, request["mode"]))


def strip(request: dict[str, Any], content: bytes) -> bytes:
    """The first ``pages`` pages one under the other, as one PNG ``width`` pixels wide (what a
    printer that takes one image per job prints: a receipt has no page breaks); an image is its
    one page. The whole image is bounded by ``max_pixels``, checked from the page sizes before
    anything is drawn; each page is drawn (and dithered) on its own."""
    if request["content_type"] in IMAGE_TYPES:
        return render({**request, "page": 1}, content)
    from PIL import Image

    document = _pdf(content, request["max_pages"])
    try:
        width, mode = request["width"], request["mode"]
        count = min(len(document), request["pages"])
        heights = [_page_height(document, index, width) for index in range(count)]
        what = f"Page 1 at {width} wide" if count == 1 else f"{count} pages at {width} wide"
        _check_pixels(width, sum(heights), request["max_pixels"], what)
        whole = Image.new(MODES[mode], (width, sum(heights)), "white")
        top = 0
        for index, height in enumerate(heights):
            whole.paste(_finished(_draw(document, index, width, height, mode), mode), (0, top))
            top += height
        return _png(whole)
    finally:
        document.close()


OPERATIONS = {"render": render, "strip": strip}


def answer(request: dict[str, Any], content: bytes) -> tuple[dict[str, Any], bytes]:
    if request["content_type"] not in PDF_TYPES and request["content_type"] not in IMAGE_TYPES:
        raise Refusal("no_preview", "Not a PDF, PNG or JPEG document.")
    if request["op"] == "info":
        return {"ok": True, **info(request, content), "size": 0}, b""
    png = OPERATIONS[request["op"]](request, content)
    return {"ok": True, "size": len(png)}, png


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write(stream: BinaryIO, header: dict[str, Any], body: bytes = b"") -> None:
    stream.write(json.dumps(header).encode() + b"\n" + body)
    stream.flush()


def serve(memory_bytes: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
    import PIL.Image  # noqa: F401
    import pypdfium2  # noqa: F401  (loaded before the cap: what the cap measures is the work)

    try:
        import resource
    except ImportError:  # not a POSIX system: the node's time limit still holds
        pass
    else:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory_bytes > 0:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _write(stdout, {"ready": True, "pid": os.getpid()})
    while True:
        line = stdin.readline(65536)
        if not line:
            return
        request = json.loads(line)
        content = _read_exactly(stdin, request["size"])
        try:
            header, body = answer(request, content)
        except Refusal as exc:
            header, body = {"ok": False, "code": exc.code, "message": exc.message}, b""
        except MemoryError:
            del content
            _write(stdout, {"ok": False, "code": "too_much_memory", "message": ""})
            return  # a process that ran out of memory is not trusted with the next document
        except Exception as exc:  # a library's own failure on this document: refuse it
            header = {"ok": False, "code": "render_failed", "message": type(exc).__name__}
            body = b""
        _write(stdout, header, body)


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer)
