"""OCR of one page with Tesseract, inside a parsing process: the scan itself, or a render."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from pdfqueue.domain.errors import PermanentError
from pdfqueue_worker.candidates import Source, page_candidates

if TYPE_CHECKING:
    from PIL.Image import Image

OCR_DPI = 300
"""Resolution Tesseract reads best at; a scan finer than OCR_MAX_DPI is scaled down to it."""
OCR_MAX_DPI = 400
MAX_PIXELS = 40_000_000
"""Largest image handed to Tesseract (A4 at 300 DPI is 8.7 MP): a huge page or embedded
image is scaled down, never decoded or rendered at full size."""
TESSDATA_DIRS = (
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
)
"""Where Debian's tesseract-ocr-eng (and other distributions) put the language data."""
PSM_AUTO = 3
"""Tesseract's page segmentation with column and block detection (its default)."""
PSM_SINGLE_BLOCK = 6
"""One block of text: no column detection, enough for a band across the page."""
PSM_SINGLE_LINE = 7
"""One line of text: how a band's lines are read one at a time."""
LINE_MARGIN = 4
"""Pixels added on every side of a line's box before it is read alone: the box hugs the
ink, and a glyph cut at its edge reads worse."""
_UNUSABLE = 0.5
"""A page whose text is more than half unknown glyphs (U+FFFD, private use, `(cid:N)`)
has no usable text layer."""

_UNKNOWN = re.compile(r"[\ufffd\ue000-\uf8ff]|\(cid:\d+\)")
"""A glyph without Unicode meaning: U+FFFD, private use, or pdfminer-style `(cid:N)`."""
_GLYPH = re.compile("[\ufffd\ue000-\uf8ff]")
_SPACE = re.compile(r"\s")
_engines: dict[bool, Any] = {}


class OcrUnavailable(PermanentError):
    """Tesseract or its English data is not installed: the file `needs_ocr`."""


@dataclass(frozen=True)
class Plan:
    """How a page is read: bands where contact details sit first, then the whole page."""

    bands: tuple[tuple[float, float], ...] = ((0.0, 0.15), (0.9, 1.0))
    """Top and bottom of each band, as fractions of the page's height, read in turn; the
    first with a candidate ends the read. None has one: the whole page."""
    band_dpi: int = OCR_DPI
    """Resolution of a band's read, at most (at 200 DPI a dot in a turned scan's address
    went missing)."""
    band_psm: int = PSM_SINGLE_BLOCK
    """Segmentation of a band (the layout its lines are found by, when read line by line)."""
    by_line: bool = True
    """A band's lines are read one at a time from the top, up to the line after the first
    with a candidate: recognition, not layout, is most of a band's cost, and the lines below
    the address add nothing to it."""
    page_dpi: int = OCR_DPI
    """Resolution of the whole page's read."""
    dictionaries: bool = True
    """Tesseract's word lists (a second engine without them, for `bench/scans.py`)."""
    invert: bool = False
    """Tesseract's second read of every doubtful line as white on black (its default): scans
    of résumés are dark on light, and it costs a tenth of a page."""


REGION_FIRST = Plan()
"""The worker's read (`bench/scans.py` measures it against WHOLE_PAGE)."""
WHOLE_PAGE = Plan(bands=(), invert=True)
"""The whole page at Tesseract's defaults, as every page was read before the bands."""


def unusable(text: str) -> bool:
    """No text layer worth reading: empty, or mostly glyphs without Unicode meaning."""
    if "(cid:" not in text and _GLYPH.search(text) is None:  # the usual page, at C speed
        return not text.strip()
    shown = len(text) - len(_SPACE.findall(text))
    unknown = sum(len(glyph) for glyph in _UNKNOWN.findall(text))
    return shown == 0 or unknown > _UNUSABLE * shown


def drawn(page: pdfium.PdfPage) -> bool:
    """Whether the page shows anything (an empty page needs no OCR)."""
    return bool(pdfium_c.FPDFPage_CountObjects(page.raw))


def tessdata(configured: str | None = None) -> str | None:
    """The language data folder with `eng.traineddata`, or None: `configured`, else
    TESSDATA_PREFIX (Tesseract's own variable), else the usual folders."""
    configured = configured or os.environ.get("TESSDATA_PREFIX")
    for folder in (configured,) if configured else TESSDATA_DIRS:
        if (Path(folder) / "eng.traineddata").is_file():
            return folder
    return None


def _engine(configured: str | None = None, dictionaries: bool = True) -> Any:
    """This process's Tesseract, started once (loading the model costs ~0.3 s)."""
    api = _engines.get(dictionaries)
    if api is None:  # one engine per parsing process, reused across pages
        folder = tessdata(configured)
        if folder is None:
            raise OcrUnavailable("no eng.traineddata")
        try:
            import tesserocr
        except ImportError as exc:
            raise OcrUnavailable("tesserocr is not installed") from exc
        off = {} if dictionaries else {"load_system_dawg": "0", "load_freq_dawg": "0"}
        try:
            api = tesserocr.PyTessBaseAPI(
                path=folder, lang="eng", psm=tesserocr.PSM.AUTO, variables=off
            )
        except RuntimeError as exc:
            raise OcrUnavailable(str(exc)) from exc
        _engines[dictionaries] = api
    return api


def available(configured: str | None = None) -> bool:
    """Whether this process can OCR."""
    try:
        _engine(configured)
    except OcrUnavailable:
        return False
    return True


def read_page(
    page: pdfium.PdfPage, configured: str | None = None, plan: Plan = REGION_FIRST
) -> str:
    """The page's text as Tesseract reads it (`configured`: the language data folder)."""
    return read(page, configured, plan)[0]


def read(page: pdfium.PdfPage, configured: str | None, plan: Plan) -> tuple[str, int | None]:
    """The text of the first of `plan`'s bands with a candidate address and that band's
    number, else the whole page's text and None."""
    api = _engine(configured, plan.dictionaries)
    image = page_image(page)
    try:
        api.SetVariable("tessedit_do_invert", "1" if plan.invert else "0")
        dpi = image.width / max(page.get_width() / 72, 1e-6)
        for number, (top, bottom) in enumerate(plan.bands):
            band = _band(image, top, bottom, dpi, plan.band_dpi)
            if plan.by_line:
                text = _recognize_to_candidate(api, band, plan.band_psm)
            else:
                text = _recognize(api, band, plan.band_psm)
            if page_candidates(text, 0, source=Source.OCR):
                return text, number
        return _recognize(api, _band(image, 0.0, 1.0, dpi, plan.page_dpi), PSM_AUTO), None
    finally:
        image.close()


def _recognize(api: Any, image: Image, psm: int) -> str:
    try:
        api.SetPageSegMode(psm)
        api.SetImage(image)
        return str(api.GetUTF8Text())
    finally:
        api.Clear()


def _recognize_to_candidate(api: Any, image: Image, psm: int) -> str:
    """The image's lines (found by `psm`'s layout), read one at a time in reading order up
    to the line after the first whose text so far has a candidate: an address broken at a
    line's end (`dehyphenated` candidates) goes on at the start of the next. Every line
    when none has one."""
    try:
        api.SetPageSegMode(psm)
        api.SetImage(image)
        boxes = _line_boxes(api.AnalyseLayout())
        api.SetPageSegMode(PSM_SINGLE_LINE)
        text, found_at = "", None
        for number, box in enumerate(boxes):
            api.SetRectangle(*_with_margin(box, image.width, image.height))
            text += str(api.GetUTF8Text())
            if found_at is not None:
                break  # the line after the candidate's
            if page_candidates(text, 0, source=Source.OCR):
                found_at = number
        return text
    finally:
        api.Clear()


def _line_boxes(layout: Any) -> list[tuple[int, int, int, int]]:
    """(left, top, right, bottom) of each text line of Tesseract's layout, in reading
    order; none when it found no text (`AnalyseLayout` gives None)."""
    import tesserocr

    boxes: list[tuple[int, int, int, int]] = []
    if layout is None:
        return boxes
    while True:
        box = layout.BoundingBox(tesserocr.RIL.TEXTLINE)
        if box is not None:
            boxes.append(box)
        if not layout.Next(tesserocr.RIL.TEXTLINE):
            return boxes


def _with_margin(
    box: tuple[int, int, int, int], width: int, height: int
) -> tuple[int, int, int, int]:
    """`box` grown by LINE_MARGIN on every side, within the image, as SetRectangle takes it
    (left, top, width, height)."""
    left, top = max(0, box[0] - LINE_MARGIN), max(0, box[1] - LINE_MARGIN)
    right, bottom = min(width, box[2] + LINE_MARGIN), min(height, box[3] + LINE_MARGIN)
    return left, top, max(1, right - left), max(1, bottom - top)


def _band(image: Image, top: float, bottom: float, dpi: float, band_dpi: int) -> Image:
    """Rows `top` to `bottom` (fractions of the height) of `image`, at most `band_dpi`:
    cut first, so only the band is scaled (Tesseract's own SetRectangle on the whole image
    read a fraction of the band's lines when tried). At least one row: Tesseract refuses an
    empty image."""
    if (top, bottom) == (0.0, 1.0) and dpi <= band_dpi:
        return image
    first = min(round(top * image.height), image.height - 1)
    band = image.crop((0, first, image.width, max(round(bottom * image.height), first + 1)))
    if dpi <= band_dpi:
        return band
    factor = band_dpi / dpi
    return band.resize((max(1, round(band.width * factor)), max(1, round(band.height * factor))))


def page_image(page: pdfium.PdfPage) -> Image:
    """Grey image of the page: its only object when that is an upright scan (no render,
    no resampling loss), else the page rendered at OCR_DPI."""
    scan = _single_image(page)
    if scan is not None:
        return scan
    width, height = page.get_size()
    scale = min(OCR_DPI / 72, math.sqrt(MAX_PIXELS / max(width * height, 1.0)))
    bitmap = page.render(scale=scale, grayscale=True)
    try:
        rendered: Image = bitmap.to_pil().convert("L")
    finally:
        bitmap.close()
    return rendered


def _single_image(page: pdfium.PdfPage) -> Image | None:
    objects = list(page.get_objects(max_depth=1))
    if len(objects) != 1 or objects[0].type != pdfium_c.FPDF_PAGEOBJ_IMAGE:
        return None
    image = objects[0]
    assert isinstance(image, pdfium.PdfImage)
    a, b, c, d, _, _ = image.get_matrix().get()
    px_w, px_h = image.get_px_size()
    if page.get_rotation() or b or c or a <= 0 or d <= 0 or px_w * px_h > MAX_PIXELS:
        return None  # turned, skewed or huge: the render puts it upright and bounded
    # PDFium owns this bitmap (closing it by hand is unsafe): it goes with the page.
    pil: Image = image.get_bitmap(render=False).to_pil().convert("L")
    dpi = px_w / (a / 72)
    if dpi > OCR_MAX_DPI:
        factor = OCR_DPI / dpi
        pil = pil.resize((max(1, round(px_w * factor)), max(1, round(px_h * factor))))
    return pil
