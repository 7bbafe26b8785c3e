"""Tests of hecore.images: loading, the conversion policy, typed errors, preprocessing.

All images are generated in tmp_path, except in the USC-SIPI tests at the end: they read the data set
or, without it, its stand-ins (tests/conftest.py).
"""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from conftest import shared_dataset
from PIL import Image, ImageFile

from hecore.errors import (DecompressionBomb, EmptyImage, ImageError, TruncatedImage, UnreadableImage,
    UnsupportedImageMode)
from hecore.images import (ImagePolicy, LoadedImage, array_to_image_bytes, center_crop, export_bmp,
    load_image, preprocess, resize)

RNG = np.random.default_rng(1234)
GREY = RNG.integers(0, 256, (23, 31), dtype=np.uint8)
COLOUR = RNG.integers(0, 256, (23, 31, 3), dtype=np.uint8)
ALL = ImagePolicy(conversions=frozenset({"palette", "alpha", "16bit", "bilevel"}))


def save(tmp_path, name, image: Image.Image, **kw):
    path = tmp_path / name
    image.save(path, **kw)
    return path


def png_bytes(width, height, bit_depth, colour_type, rows: bytes) -> bytes:
    """A hand-made PNG (Pillow cannot write 16-bit RGB)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# --- round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize("ext", ["png", "tiff", "bmp"])
@pytest.mark.parametrize("pixels", [GREY, COLOUR], ids=["L", "RGB"])
def test_lossless_round_trip_is_exact(tmp_path, ext, pixels):
    path = save(tmp_path, f"img.{ext}", Image.fromarray(pixels))
    img = load_image(path)
    assert img.pixels.dtype == np.uint8 and img.pixels.flags.c_contiguous
    np.testing.assert_array_equal(img.pixels, pixels)
    assert img.mode == ("L" if pixels.ndim == 2 else "RGB")
    assert img.conversions == ()
    assert img.source == str(path)


@pytest.mark.parametrize("channels", [1, 3], ids=["L", "RGB"])
def test_jpeg_round_trip_is_close(tmp_path, channels):
    ramp = np.add.outer(np.arange(23) * 4, np.arange(31) * 4).astype(np.uint8)  # smooth: JPEG-friendly
    pixels = ramp if channels == 1 else np.dstack([ramp, ramp[::-1], 255 - ramp])
    img = load_image(save(tmp_path, "img.jpg", Image.fromarray(pixels), quality=95))
    assert (img.format, img.pixels.shape) == ("JPEG", pixels.shape)
    assert np.abs(img.pixels.astype(int) - pixels).mean() < 3


def test_format_and_shape_properties(tmp_path):
    img = load_image(save(tmp_path, "c.png", Image.fromarray(COLOUR)))
    assert (img.format, img.height, img.width, img.channels) == ("PNG", 23, 31, 3)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_bytes_input(wrap):
    data = array_to_image_bytes(COLOUR, "TIFF")
    img = load_image(wrap(data))
    np.testing.assert_array_equal(img.pixels, COLOUR)
    assert img.source == "<bytes>"


def test_bytes_input_uses_given_source_in_errors():
    with pytest.raises(UnreadableImage, match="hdfs://x/y.tif"):
        load_image(b"hello, not an image", source="hdfs://x/y.tif")


def test_first_frame_of_multipage_tiff_is_reported(tmp_path):
    frames = [Image.fromarray(np.full((4, 5), v, np.uint8)) for v in (10, 100, 200)]
    path = save(tmp_path, "pages.tiff", frames[0], save_all=True, append_images=frames[1:])
    img = load_image(path)
    assert img.conversions == ("first-frame",)
    assert (img.pixels == 10).all()


# --- bad input: typed errors naming the file -------------------------------------------------

def test_missing_file_is_unreadable(tmp_path):
    with pytest.raises(UnreadableImage, match="nothere.png") as err:
        load_image(tmp_path / "nothere.png")
    assert err.value.reason == "not-an-image"


def test_directory_is_unreadable(tmp_path):
    with pytest.raises(UnreadableImage, match=str(tmp_path.name)):
        load_image(tmp_path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    with pytest.raises(EmptyImage, match="empty.png") as err:
        load_image(path)
    assert err.value.reason == "empty-file"


def test_empty_bytes():
    with pytest.raises(EmptyImage, match="<bytes>"):
        load_image(b"")


def test_text_is_not_an_image(tmp_path):
    path = tmp_path / "notes.tiff"
    path.write_text("this is a text file, not an image\n" * 10)
    with pytest.raises(UnreadableImage, match="notes.tiff"):
        load_image(path)


def test_truncated_tiff(tmp_path):
    path = save(tmp_path, "cut.tiff", Image.fromarray(COLOUR))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedImage, match="cut.tiff") as err:
        load_image(path)
    assert err.value.reason == "truncated"


def test_truncated_compressed_tiff_with_header_at_end(tmp_path):
    # Pillow writes the directory of a compressed TIFF after the pixel data, so
    # cutting the file removes the header: still "truncated", not "not an image".
    path = save(tmp_path, "lzw.tiff", Image.fromarray(COLOUR), compression="tiff_lzw")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedImage, match="lzw.tiff"):
        load_image(path)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP"])
def test_truncated_bytes_of_other_formats(fmt):
    data = array_to_image_bytes(COLOUR, fmt)
    with pytest.raises(TruncatedImage, match="half"):
        load_image(data[: len(data) // 2], source=f"half.{fmt}")


def test_truncation_is_not_silently_accepted():
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


# --- decompression bombs ------------------------------------------------------------------

@pytest.fixture
def bomb(tmp_path):
    """A real 3000x3000 PNG of zeros: a few kB on disk, 9 Mpixel decoded."""
    return save(tmp_path, "bomb.png", Image.new("L", (3000, 3000)))


def test_bomb_is_refused(bomb):
    with pytest.raises(DecompressionBomb, match="bomb.png") as err:
        load_image(bomb, policy=ImagePolicy(max_pixels=1_000_000))
    assert "3000x3000" in str(err.value)
    assert err.value.reason == "decompression-bomb"


def test_bomb_is_refused_before_decoding(bomb, monkeypatch):
    def no_decoding(self):
        raise AssertionError("pixel data was decoded")
    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    with pytest.raises(DecompressionBomb):
        load_image(bomb, policy=ImagePolicy(max_pixels=1_000_000))


def test_bomb_limit_is_inclusive(bomb):
    assert load_image(bomb, policy=ImagePolicy(max_pixels=9_000_000)).pixels.shape == (3000, 3000)


def test_pillow_bomb_warning_is_mapped(bomb, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 5_000_000)  # 9e6 > limit: warning
    with pytest.raises(DecompressionBomb, match="bomb.png"):
        load_image(bomb)


def test_pillow_bomb_error_is_mapped(bomb, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)  # 9e6 > 2*limit: error
    with pytest.raises(DecompressionBomb, match="bomb.png"):
        load_image(bomb)


# --- modes: strict by default, documented opt-in conversions -------------------------------

def rgba_image():
    rgba = np.dstack([COLOUR, np.zeros(GREY.shape, np.uint8)])  # fully transparent
    return Image.fromarray(rgba, "RGBA")


def test_rgba_refused_by_default_with_the_option_named(tmp_path):
    path = save(tmp_path, "alpha.png", rgba_image())
    with pytest.raises(UnsupportedImageMode) as err:
        load_image(path)
    message = str(err.value)
    assert "alpha.png" in message and "'RGBA'" in message
    assert "conversions={'alpha'} (API)" in message and "--convert alpha (command line)" in message
    assert err.value.reason == "unsupported-mode"


def test_rgba_alpha_is_discarded_not_composited(tmp_path):
    img = load_image(save(tmp_path, "alpha.png", rgba_image()), policy=ImagePolicy(conversions={"alpha"}))
    np.testing.assert_array_equal(img.pixels, COLOUR)
    assert (img.mode, img.conversions) == ("RGB", ("alpha",))


def test_la_becomes_l_with_alpha_option(tmp_path):
    la = Image.fromarray(np.dstack([GREY, np.full(GREY.shape, 9, np.uint8)]), "LA")
    img = load_image(save(tmp_path, "la.png", la), policy=ImagePolicy(conversions={"alpha"}))
    np.testing.assert_array_equal(img.pixels, GREY)
    assert img.mode == "L"


def palette_image():
    pal = Image.new("P", (3, 2))
    pal.putpalette([0, 0, 0, 10, 20, 30, 200, 100, 50] + [0] * (256 * 3 - 9))
    pal.putdata([0, 1, 2, 2, 1, 0])
    return pal


def test_palette_refused_by_default(tmp_path):
    path = save(tmp_path, "pal.png", palette_image())
    with pytest.raises(UnsupportedImageMode, match=r"pal\.png.*'P'.*conversions=\{'palette'\}"):
        load_image(path)


def test_palette_expanded_to_rgb(tmp_path):
    img = load_image(save(tmp_path, "pal.png", palette_image()), policy=ImagePolicy(conversions={"palette"}))
    expected = np.array([[[0, 0, 0], [10, 20, 30], [200, 100, 50]],
                         [[200, 100, 50], [10, 20, 30], [0, 0, 0]]], np.uint8)
    np.testing.assert_array_equal(img.pixels, expected)
    assert img.conversions == ("palette",)


def test_16bit_refused_by_default(tmp_path):
    path = save(tmp_path, "deep.png", Image.fromarray(np.zeros((2, 2), np.uint16)))
    with pytest.raises(UnsupportedImageMode, match=r"deep\.png.*'I;16'.*--convert 16bit"):
        load_image(path)


@pytest.mark.parametrize("ext", ["png", "tiff"])
def test_16bit_scaled_by_257(tmp_path, ext):
    k = np.arange(256, dtype=np.uint16)
    values = np.concatenate([257 * k, [65535, 128, 129]]).astype(np.uint16).reshape(1, -1)
    path = save(tmp_path, f"deep.{ext}", Image.fromarray(values))
    img = load_image(path, policy=ImagePolicy(conversions={"16bit"}))
    np.testing.assert_array_equal(img.pixels[0, :256], k)
    assert img.pixels[0, 256] == 255  # 65535 -> 255
    assert list(img.pixels[0, 257:]) == [0, 1]  # round(128/257) = 0, round(129/257) = 1
    assert (img.mode, img.conversions) == ("L", ("16bit",))


def test_16bit_pgm_decoded_as_mode_i_is_accepted(tmp_path):
    path = tmp_path / "deep.pgm"
    path.write_bytes(b"P5\n2 1\n65535\n" + np.array([65535, 257 * 7], ">u2").tobytes())
    img = load_image(path, policy=ImagePolicy(conversions={"16bit"}))
    assert list(img.pixels[0]) == [255, 7]


def test_16bit_rgb_png_refused_by_default():
    rows = b"\x00" + b"\x12\x34\xff\xff\x00\x00"  # one pixel: 0x1234, 0xffff, 0
    data = png_bytes(1, 1, 16, 2, rows)
    with pytest.raises(UnsupportedImageMode, match="16bit"):
        load_image(data, source="rgb16.png")
    img = load_image(data, policy=ImagePolicy(conversions={"16bit"}))
    assert list(img.pixels[0, 0]) == [0x12, 0xFF, 0]  # Pillow keeps the high byte
    assert img.conversions == ("16bit",)


def test_bilevel_refused_then_mapped_to_0_255(tmp_path):
    bits = Image.fromarray(GREY > 127)
    path = save(tmp_path, "bits.png", bits)
    with Image.open(path) as check:
        assert check.mode == "1"
    with pytest.raises(UnsupportedImageMode, match="--convert bilevel"):
        load_image(path)
    img = load_image(path, policy=ImagePolicy(conversions={"bilevel"}))
    np.testing.assert_array_equal(img.pixels, np.where(GREY > 127, 255, 0))


def test_cmyk_always_refused(tmp_path):
    path = save(tmp_path, "print.jpg", Image.new("CMYK", (4, 4), (0, 50, 100, 0)))
    with pytest.raises(UnsupportedImageMode, match=r"print\.jpg.*'CMYK'.*colour management"):
        load_image(path, policy=ALL)


@pytest.mark.parametrize("dtype, mode", [(np.float32, "F"), (np.int32, "I")])
def test_float_and_32bit_always_refused(tmp_path, dtype, mode):
    path = save(tmp_path, "wide.tiff", Image.fromarray(np.zeros((2, 2), dtype)))
    with pytest.raises(UnsupportedImageMode, match=rf"wide\.tiff.*'{mode}'"):
        load_image(path, policy=ALL)


def test_unknown_conversion_rejected():
    with pytest.raises(ValueError, match="colour"):
        ImagePolicy(conversions=frozenset({"colour"}))


def test_every_error_is_an_image_error():
    with pytest.raises(ImageError):
        load_image(b"\x00\x01")


# --- preprocessing and output -----------------------------------------------------------------

def test_center_crop_largest_square():
    a = np.arange(4 * 6).reshape(4, 6).astype(np.uint8)
    np.testing.assert_array_equal(center_crop(a), a[:, 1:5])


def test_center_crop_given_size_rgb():
    out = center_crop(COLOUR, 5)
    np.testing.assert_array_equal(out, COLOUR[9:14, 13:18])


def test_center_crop_too_large():
    with pytest.raises(ValueError, match="24x24.*23x31"):
        center_crop(GREY, 24)


@pytest.mark.parametrize("pixels", [GREY, COLOUR], ids=["L", "RGB"])
def test_resize_shape_and_dtype(pixels):
    out = resize(pixels, 16)
    assert out.dtype == np.uint8 and out.shape == (16, 16) + pixels.shape[2:]


def test_resize_keeps_constant_image_constant():
    assert (resize(np.full((10, 7), 77, np.uint8), 32) == 77).all()


def test_resize_unknown_resample():
    with pytest.raises(ValueError, match="sharpest"):
        resize(GREY, 8, resample="sharpest")


def test_preprocess_crops_then_resizes_and_keeps_conversions():
    img = LoadedImage(COLOUR, "RGB", "x.png", "PNG", ("alpha",))
    out = preprocess(img, 8)
    assert out.pixels.shape == (8, 8, 3)
    np.testing.assert_array_equal(out.pixels, resize(COLOUR[:, 4:27], 8))
    assert (out.conversions, out.source, out.format) == (("alpha",), "x.png", "PNG")


def test_preprocess_none_is_identity():
    img = LoadedImage(GREY, "L", "x.png")
    assert preprocess(img, None) is img


@pytest.mark.parametrize("pixels", [GREY, COLOUR], ids=["L", "RGB"])
def test_export_bmp_round_trip(tmp_path, pixels):
    path = tmp_path / "out.bmp"
    export_bmp(pixels, path)
    img = load_image(path)
    assert img.format == "BMP"
    np.testing.assert_array_equal(img.pixels, pixels)


def test_array_to_image_bytes_png():
    data = array_to_image_bytes(GREY)
    assert data.startswith(b"\x89PNG")
    np.testing.assert_array_equal(load_image(data).pixels, GREY)


def test_loaded_image_rejects_wrong_mode():
    with pytest.raises(ValueError, match="mode"):
        LoadedImage(GREY, "RGB", "x")


# --- a real data set -------------------------------------------------------------------------

def test_usc_sipi_grey(usc_sipi):
    path = usc_sipi / "5.1.12.tiff"
    img = load_image(path)
    assert (img.mode, img.pixels.shape, img.format, img.conversions) == ("L", (256, 256), "TIFF", ())
    assert img.pixels.std() > 10  # real picture content, not a blank


def test_usc_sipi_colour():
    path = shared_dataset("usc-sipi/4.1.01.tiff")
    img = load_image(path)
    assert (img.mode, img.pixels.shape, img.conversions) == ("RGB", (256, 256, 3), ())
    assert preprocess(img, 64).pixels.shape == (64, 64, 3)
