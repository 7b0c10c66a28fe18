"""Pictures of text for the corpus's OCR models: pages and text lines rendered with Pillow, deterministic by seed.

An OCR model is judged on what its users feed it: pages of text for a detector, a layout
or an orientation model, a boxed line of text for a recognizer or an orientation
classifier. Natural pictures hold almost no text (a DB detector's probability map stays
near zero and a recognizer reads nothing), so calibration would never see the
activations text produces. Here:

* :func:`page` renders a document page: a title, paragraphs of words and numbers in a
  few fonts and sizes, sometimes a table or a figure, on paper or on a faded picture
  (texture), sometimes turned a little, blurred or noisy; with the box of every line.
* :func:`text_line` renders one line (words, numbers, codes, mixed case) cropped as a
  detector boxes it, sometimes upside down, with captcha-style strokes or noise.

The same seed gives the same pixels on a machine with the same fonts (the system's
DejaVu fonts when found, else Pillow's own scalable font). Chinese words are used only
when a font that has their glyphs is found. Callers give calibration and evaluation
different seeds, so evaluation text is never seen by calibration.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

__all__ = ["Rendered", "font_files", "page", "text_line", "words"]

FONT_DIRS = (Path("/usr/share/fonts"), Path("/usr/local/share/fonts"), Path.home() / ".fonts")
# The DejaVu faces Debian's fonts-dejavu-core ships: sans, serif, mono, bold, italic.
LATIN_FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf",
               "DejaVuSerif-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSerif-Italic.ttf",
               "DejaVuSansCondensed.ttf", "DejaVuSansMono-Bold.ttf")
CJK_HINTS = ("cjk", "wqy", "droidsansfallback", "simsun", "simhei", "ukai", "uming", "arphic")

VOCABULARY = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her all she there would their we him been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such like "
    "our over man me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three invoice total amount date number page report "
    "account balance order price quantity address phone customer payment receipt station street avenue "
    "hospital market coffee table figure chapter section summary results method data model network signal "
    "London Paris Tokyo Berlin Monday Friday January March October December"
).split()
CHINESE = ("中国", "北京", "上海", "发票", "日期", "金额", "合计", "电话", "地址", "文本", "识别", "数据",
           "报告", "价格", "数量", "客户", "订单", "时间", "公司", "银行")


@dataclass
class Rendered:
    """A rendered picture (uint8 RGB, H x W x 3), its text and the box of each line of
    text in it (x0, y0, x1, y1), in the picture's pixels."""
    pixels: np.ndarray
    text: list[str]
    boxes: list[tuple[int, int, int, int]]


@cache
def font_files() -> tuple[Path, ...]:
    """The system's TrueType fonts used: the DejaVu faces found (in LATIN_FONTS' order),
    then fonts with Chinese glyphs; empty when none is installed (Pillow's own font then)."""
    found = {p.name: p for d in FONT_DIRS if d.is_dir() for p in sorted(d.rglob("*.tt[fc]"))}
    latin = [found[n] for n in LATIN_FONTS if n in found]
    cjk = [p for n, p in sorted(found.items()) if any(h in n.lower() for h in CJK_HINTS)]
    return tuple(latin + [p for p in cjk if _has_glyphs(p, "".join(CHINESE))])


def _has_glyphs(path: Path, text: str) -> bool:
    """Whether the font draws every character of ``text`` with a glyph of its own (not the
    box it draws for a character it lacks)."""
    font = ImageFont.truetype(str(path), 24)
    missing = font.getmask("\U0010fffd")
    lacks = (missing.size, bytes(missing))
    for ch in text:
        mask = font.getmask(ch)
        if (mask.size, bytes(mask)) == lacks or mask.getbbox() is None:
            return False
    return True


@cache
def _font(index: int, size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    files = font_files()
    if not files:
        return ImageFont.load_default(size)   # Pillow's scalable font (a bitmap one without FreeType)
    return ImageFont.truetype(str(files[index % len(files)]), size)


def _latin_fonts() -> int:
    """How many of the fonts are Latin ones (the first ones): at least 1 (Pillow's own)."""
    return max(1, sum(p.name in LATIN_FONTS for p in font_files()))


def _chinese_font() -> int | None:
    files = font_files()
    cjk = [i for i, p in enumerate(files) if p.name not in LATIN_FONTS]
    return cjk[0] if cjk else None


def words(rng: np.random.Generator, count: int, chinese: bool = False) -> str:
    """``count`` words as a document holds them: mostly lower case, some capitalized or
    upper case, numbers, prices, dates and codes among them; Chinese words if asked."""
    out = []
    for _ in range(count):
        kind = rng.random()
        if chinese and kind < 0.5:
            out.append("".join(rng.choice(CHINESE, rng.integers(1, 3))))
        elif kind < 0.62:
            out.append(str(rng.choice(VOCABULARY)))
        elif kind < 0.74:
            out.append(str(rng.choice(VOCABULARY)).capitalize())
        elif kind < 0.8:
            out.append(str(rng.choice(VOCABULARY)).upper())
        elif kind < 0.86:
            out.append(str(rng.integers(0, 10 ** int(rng.integers(1, 6)))))
        elif kind < 0.91:
            out.append(f"{rng.integers(1, 9999)}.{rng.integers(0, 100):02d}")
        elif kind < 0.95:
            out.append(f"{rng.integers(1990, 2030)}-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}")
        else:
            letters = "".join(rng.choice(list("ABCDEFGHJKLMNPRSTUVWXYZ"), 2))
            out.append(f"{letters}-{rng.integers(100, 99999)}")
    return " ".join(out)


# backgrounds and ink -----------------------------------------------------------------------

def _fit(picture: np.ndarray, height: int, width: int) -> np.ndarray:
    """``picture`` scaled to cover (height, width) and center-cropped to it."""
    img = Image.fromarray(picture)
    scale = max(height / img.height, width / img.width)
    img = img.resize((max(width, round(img.width * scale)), max(height, round(img.height * scale))),
                     Image.Resampling.BILINEAR)
    top, left = (img.height - height) // 2, (img.width - width) // 2
    return np.asarray(img.crop((left, top, left + width, top + height)))


def _background(rng: np.random.Generator, height: int, width: int, picture: np.ndarray | None) -> np.ndarray:
    """Paper (a light tint, lit unevenly, grain) or, given a picture, that picture faded
    toward paper so that dark text on it stays readable (a textured background)."""
    tint = rng.uniform(215, 255, 3) if rng.random() < 0.5 else np.full(3, rng.uniform(225, 255))
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    light = 1 - rng.uniform(0, 0.12) * ((ys / height) * rng.uniform(-1, 1) + (xs / width) * rng.uniform(-1, 1)) ** 2
    paper = tint[None, None] * light[..., None] + rng.normal(0, 2.0, (height, width, 1))
    if picture is not None:
        fade = rng.uniform(0.15, 0.45)     # how much of the picture shows through
        paper = paper * (1 - fade) + _fit(picture, height, width).astype(np.float32) * fade
    return np.clip(paper, 0, 255)


def _ink(rng: np.random.Generator, paper: np.ndarray) -> tuple[int, int, int]:
    """A dark ink colour, well below the paper's darker pixels (readable)."""
    darkest = float(np.percentile(paper.mean(axis=2), 5))
    top = max(10.0, min(90.0, darkest - 90))
    base = rng.uniform(0, top)
    return tuple(int(np.clip(base + rng.uniform(-20, 20), 0, 255)) for _ in range(3))  # type: ignore[return-value]


def _finish(rng: np.random.Generator, img: Image.Image, blur: float, noise: float) -> np.ndarray:
    if blur:
        img = img.filter(ImageFilter.GaussianBlur(blur))
    pixels = np.asarray(img, np.float32)
    if noise:
        pixels = pixels + rng.normal(0, noise, pixels.shape)
    return np.clip(np.round(pixels), 0, 255).astype(np.uint8)


def _rotate_boxes(boxes: list[tuple[int, int, int, int]], degrees: float, height: int,
                  width: int) -> list[tuple[int, int, int, int]]:
    """The axis-aligned boxes around ``boxes`` turned by ``degrees`` about the picture's
    center (counter-clockwise, as Pillow's ``rotate``)."""
    a = np.deg2rad(degrees)
    cx, cy = width / 2, height / 2
    out = []
    for x0, y0, x1, y1 in boxes:
        xs, ys = np.array([x0, x1, x1, x0]) - cx, np.array([y0, y0, y1, y1]) - cy
        rx, ry = xs * np.cos(a) + ys * np.sin(a) + cx, -xs * np.sin(a) + ys * np.cos(a) + cy
        out.append((int(np.clip(rx.min(), 0, width)), int(np.clip(ry.min(), 0, height)),
                    int(np.clip(np.ceil(rx.max()), 0, width)), int(np.clip(np.ceil(ry.max()), 0, height))))
    return out


def _seal(rng: np.random.Generator, img: Image.Image, cx: int, cy: int, radius: int) -> tuple[str, tuple[int, ...]]:
    """Stamp a red round seal on ``img``: a ring, upper-case words along its upper arc, a
    star in the middle (what a seal text detector looks for); its text and box."""
    colour = (int(rng.uniform(170, 235)), int(rng.uniform(0, 60)), int(rng.uniform(0, 60)))
    draw = ImageDraw.Draw(img)
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), outline=colour, width=max(2, radius // 14))
    star = [(cx + (radius * (0.28 if k % 2 == 0 else 0.11)) * np.sin(np.pi * k / 5),
             cy - (radius * (0.28 if k % 2 == 0 else 0.11)) * np.cos(np.pi * k / 5)) for k in range(10)]
    draw.polygon(star, fill=colour)
    text = words(rng, int(rng.integers(2, 5))).upper()
    size = max(8, int(radius * 0.26))
    font = _font(int(rng.integers(0, _latin_fonts())), size)
    span = np.deg2rad(rng.uniform(200, 280))
    along = radius - int(size * 0.75)   # the letters' centers, inside the ring
    for ch, angle in zip(text, np.linspace(-span / 2, span / 2, len(text))):
        glyph = Image.new("L", (2 * size, 2 * size))
        ImageDraw.Draw(glyph).text((size, size), ch, fill=255, font=font, anchor="mm")
        glyph = glyph.rotate(-np.rad2deg(angle), resample=Image.Resampling.BILINEAR)
        x, y = cx + along * np.sin(angle) - size, cy - along * np.cos(angle) - size
        img.paste(Image.new("RGB", glyph.size, colour), (int(x), int(y)), glyph)
    return text, (max(0, cx - radius), max(0, cy - radius), min(img.width, cx + radius), min(img.height, cy + radius))


# pages -------------------------------------------------------------------------------------

def page(seed: int | tuple[int, ...], height: int, width: int, picture: np.ndarray | None = None,
         figures: bool = True, effects: bool = True, text_size: tuple[float, float] = (0.022, 0.05),
         seals: int = 0) -> Rendered:
    """A document page of ``height`` x ``width`` pixels: a title, paragraphs of justified-
    ish lines in one of the fonts (sizes scaled to the page), sometimes a table of
    numbers and (``figures``, given a ``picture``) a figure; on paper, or on ``picture``
    faded as a texture; with ``effects``, some pages turned by up to 4 degrees, blurred or
    noisy. The body text is ``text_size`` (a range) of the page's height high; ``seals``
    red round seals with text along their rim are stamped over it. ``seed``: any value
    numpy's ``default_rng`` takes."""
    rng = np.random.default_rng(seed)
    texture = picture if picture is not None and rng.random() < 0.6 else None
    paper = _background(rng, height, width, texture)
    img = Image.fromarray(paper.astype(np.uint8))
    draw = ImageDraw.Draw(img)
    ink = _ink(rng, paper)
    fonts = _latin_fonts()
    body = int(rng.integers(0, fonts))
    size = max(9, int(height * rng.uniform(*text_size)))
    margin = int(width * rng.uniform(0.04, 0.1))
    y = int(height * rng.uniform(0.03, 0.08))
    chinese = _chinese_font() is not None and rng.random() < 0.3
    text, boxes = [], []

    def write(line: str, x: int, font_index: int, font_size: int) -> int:
        """Draw ``line`` at (x, y); the y of the next line."""
        font = _font(font_index, font_size)
        while " " in line and draw.textlength(line, font=font) > width - margin - x:
            line = line.rsplit(" ", 1)[0]   # a line never runs off the page
        x0, y0, x1, y1 = (int(v) for v in draw.textbbox((x, y), line, font=font))
        if y1 >= height - margin // 2 or x1 > width:
            return height      # the page is full
        draw.text((x, y), line, fill=ink, font=font)
        text.append(line)
        boxes.append((x0, y0, x1, y1))
        return y + int(font_size * rng.uniform(1.25, 1.6))

    def fill(x: int, right: int, font_index: int, font_size: int, zh: bool = False) -> str:
        """As many words as fit between x and right (at least one)."""
        font = _font(_chinese_font() if zh else font_index, font_size)
        line = words(rng, 1, zh)
        while True:
            longer = line + " " + words(rng, 1, zh)
            if draw.textlength(longer, font=font) > right - x:
                return line
            line = longer

    title_size = int(size * rng.uniform(1.4, 2.2))
    y = write(words(rng, int(rng.integers(2, 6))).title(), margin, int(rng.integers(0, fonts)), title_size)
    y += size // 2
    table_at = int(rng.integers(1, 4)) if rng.random() < 0.35 else -1
    figure_at = int(rng.integers(1, 4)) if figures and picture is not None and rng.random() < 0.4 else -1
    block = 0
    while y < height - margin - size:
        if block == figure_at:
            fh = int(min(height - margin - y, height * rng.uniform(0.18, 0.3)))
            fw = int(min(width - 2 * margin, fh * rng.uniform(1.1, 1.8)))
            if fh > size * 2:
                img.paste(Image.fromarray(_fit(picture, fh, fw)), (margin, y))   # type: ignore[arg-type]
                y += fh + size // 2
                y = write(f"Figure {block + 1}: " + words(rng, int(rng.integers(2, 6))), margin, body,
                          max(8, int(size * 0.85)))
        elif block == table_at:
            columns = int(rng.integers(2, 5))
            step = (width - 2 * margin) // columns
            top = y
            for _ in range(int(rng.integers(2, 6))):
                if y >= height:
                    break
                row_y = y
                for c in range(columns):
                    y = row_y
                    cell = words(rng, 1) if c == 0 else f"{rng.integers(0, 10000) / 100:.2f}"
                    y = write(cell, margin + c * step + size // 3, body, size)
            if y < height:
                draw.rectangle((margin, top - size // 4, width - margin, y), outline=ink, width=max(1, size // 12))
        else:
            indent = margin + (int(size * 1.5) if rng.random() < 0.5 else 0)
            for i in range(int(rng.integers(2, 7))):
                if y >= height - margin - size:
                    break
                zh = chinese and rng.random() < 0.5
                right = width - margin - (int(rng.uniform(0.1, 0.6) * (width - 2 * margin)) if i and rng.random() < 0.2
                                          else 0)
                line = fill(indent if i == 0 else margin, right, body, size, zh)
                y = write(line, indent if i == 0 else margin, _chinese_font() if zh else body, size)  # type: ignore[arg-type]
        y += int(size * rng.uniform(0.6, 1.4))
        block += 1

    for _ in range(seals):
        radius = int(min(height, width) * rng.uniform(0.1, 0.18))
        seal = _seal(rng, img, int(rng.integers(radius, width - radius)), int(rng.integers(radius, height - radius)),
                     radius)
        text.append(seal[0])
        boxes.append(seal[1])   # type: ignore[arg-type]
    blur = float(rng.uniform(0.3, 1.2)) if effects and rng.random() < 0.3 else 0.0
    noise = float(rng.uniform(2, 9)) if effects and rng.random() < 0.4 else 0.0
    if effects and rng.random() < 0.35:
        degrees = float(rng.uniform(-4, 4))
        fill_colour = tuple(int(v) for v in np.median(paper.reshape(-1, 3), axis=0))
        img = img.rotate(degrees, resample=Image.Resampling.BILINEAR, fillcolor=fill_colour)
        boxes = _rotate_boxes(boxes, degrees, height, width)
    return Rendered(_finish(rng, img, blur, noise), text, boxes)


# text lines --------------------------------------------------------------------------------

def text_line(seed: int | tuple[int, ...], height: int = 48, picture: np.ndarray | None = None,
              upside_down: bool = False, max_aspect: float = 6.5, effects: bool = True) -> Rendered:
    """One line of text cropped as a detector boxes it (a few pixels around the ink),
    about ``height`` pixels high and at most ``max_aspect`` times as wide: 1-6 words,
    numbers or a code, in one of the fonts, on paper or a faded ``picture``; with
    ``effects`` sometimes blurred, noisy, turned by up to 2 degrees or crossed by
    captcha-style strokes; ``upside_down`` turns it by 180 degrees (what an orientation
    classifier must tell apart)."""
    rng = np.random.default_rng(seed)
    font_size = int(height * rng.uniform(0.55, 0.8))
    zh = _chinese_font() is not None and rng.random() < 0.3
    font = _font(_chinese_font() if zh else int(rng.integers(0, _latin_fonts())), font_size)  # type: ignore[arg-type]
    line = words(rng, int(rng.integers(1, 9)), zh)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    pad_x, pad_y = int(rng.integers(2, max(3, height // 6))), int(rng.integers(2, max(3, height // 8)))
    # The crop's height is the font's ink height and the padding: keep width / height in bounds.
    crop_height = probe.textbbox((0, 0), "Ag", font=font)[3] - probe.textbbox((0, 0), "Ag", font=font)[1] + 2 * pad_y
    while len(line) > 1 and probe.textlength(line, font=font) + 2 * pad_x > max_aspect * crop_height:
        line = line.rsplit(" ", 1)[0] if " " in line else line[:-1]
    x0, y0, x1, y1 = (int(v) for v in probe.textbbox((0, 0), line, font=font))
    w, h = x1 - x0 + 2 * pad_x, y1 - y0 + 2 * pad_y
    paper = _background(rng, h, w, picture if picture is not None and rng.random() < 0.5 else None)
    img = Image.fromarray(paper.astype(np.uint8))
    draw = ImageDraw.Draw(img)
    ink = _ink(rng, paper)
    draw.text((pad_x - x0, pad_y - y0), line, fill=ink, font=font)
    if effects and rng.random() < 0.15:   # captcha-style strokes across the text
        for _ in range(int(rng.integers(1, 4))):
            draw.line([(int(rng.integers(0, w)), int(rng.integers(0, h))) for _ in range(2)], fill=ink,
                      width=max(1, height // 24))
    if effects and rng.random() < 0.3:
        degrees = float(rng.uniform(-2, 2))
        img = img.rotate(degrees, resample=Image.Resampling.BILINEAR,
                         fillcolor=tuple(int(v) for v in np.median(paper.reshape(-1, 3), axis=0)))
    if upside_down:
        img = img.rotate(180)
    blur = float(rng.uniform(0.3, 1.0)) if effects and rng.random() < 0.3 else 0.0
    noise = float(rng.uniform(2, 8)) if effects and rng.random() < 0.3 else 0.0
    return Rendered(_finish(rng, img, blur, noise), [line], [(0, 0, w, h)])
