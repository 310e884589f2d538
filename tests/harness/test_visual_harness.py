"""The screenshot comparison itself: a few moved pixels pass, a moved block or a new size fails."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw

from harness.visual import MAX_CHANGED, pixel_difference


def _png(draw_box: tuple[int, int, int, int] | None = None, size: tuple[int, int] = (200, 100),
         noise: int = 0) -> bytes:
    image = Image.new("RGB", size, "white")
    pen = ImageDraw.Draw(image)
    if draw_box:
        pen.rectangle(draw_box, fill=(20, 80, 200))
    for i in range(noise):
        image.putpixel((i, 0), (0, 0, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def test_the_same_picture_and_antialiasing_noise_match() -> None:
    assert pixel_difference(_png((10, 10, 60, 40)), _png((10, 10, 60, 40))) == (None, None)
    few = int(200 * 100 * MAX_CHANGED) - 1
    assert pixel_difference(_png((10, 10, 60, 40), noise=few), _png((10, 10, 60, 40)))[0] is None


def test_a_moved_block_fails_with_a_picture_of_the_change() -> None:
    reason, picture = pixel_difference(_png((30, 10, 80, 40)), _png((10, 10, 60, 40)))
    assert reason is not None and "changed" in reason
    assert picture is not None and Image.open(io.BytesIO(picture)).size == (200, 100)


def test_a_page_of_another_height_fails() -> None:
    reason, _ = pixel_difference(_png(size=(200, 120)), _png(size=(200, 100)))
    assert reason == "size (200, 120) instead of (200, 100)"
