"""Rendered pages stacked into one PNG (a receipt printer's one image): rows kept in order."""

import io

import pytest
from PIL import Image

from qprint.documents import stack


def _page(width: int, height: int, black_row: int) -> bytes:
    image = Image.new("1", (width, height), 1)
    for x in range(width):
        image.putpixel((x, black_row), 0)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_pages_are_stacked_one_under_the_other():
    stacked = Image.open(io.BytesIO(stack.stacked([_page(16, 4, 1), _page(16, 3, 2)])))
    assert (stacked.size, stacked.mode) == ((16, 7), "1")
    black = [y for y in range(7) if stacked.getpixel((5, y)) == 0]
    assert black == [1, 4 + 2]


def test_pages_of_different_widths_are_refused():
    with pytest.raises(ValueError, match="different widths"):
        stack.stacked([_page(16, 2, 0), _page(8, 2, 0)])
