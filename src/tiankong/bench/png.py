"""A tiny RGB raster with lines, boxes, dots and a 5×7 bitmap font, written as PNG with ``zlib``.

No plotting library is needed for the benchmark charts: ``chart.py`` draws a list of shapes once and this
module rasterises them (the SVG renderer draws the same list). Text is upper-cased ASCII; characters the
font does not have are drawn as blanks.
"""

from __future__ import annotations

import struct
import zlib

Color = tuple[int, int, int]

# 5×7 glyphs, rows top to bottom, '#' = ink.
_GLYPHS = {
    "0": ".###./#...#/#..##/#.#.#/##..#/#...#/.###.", "1": "..#../.##../..#../..#../..#../..#../.###.",
    "2": ".###./#...#/....#/...#./..#../.#.../#####", "3": "#####/...#./..#../...#./....#/#...#/.###.",
    "4": "...#./..##./.#.#./#..#./#####/...#./...#.", "5": "#####/#..../####./....#/....#/#...#/.###.",
    "6": "..##./.#.../#..../####./#...#/#...#/.###.", "7": "#####/....#/...#./..#../.#.../.#.../.#...",
    "8": ".###./#...#/#...#/.###./#...#/#...#/.###.", "9": ".###./#...#/#...#/.####/....#/...#./.##..",
    "A": ".###./#...#/#...#/#####/#...#/#...#/#...#", "B": "####./#...#/#...#/####./#...#/#...#/####.",
    "C": ".###./#...#/#..../#..../#..../#...#/.###.", "D": "###../#..#./#...#/#...#/#...#/#..#./###..",
    "E": "#####/#..../#..../####./#..../#..../#####", "F": "#####/#..../#..../####./#..../#..../#....",
    "G": ".###./#...#/#..../#.###/#...#/#...#/.####", "H": "#...#/#...#/#...#/#####/#...#/#...#/#...#",
    "I": ".###./..#../..#../..#../..#../..#../.###.", "J": "..###/...#./...#./...#./...#./#..#./.##..",
    "K": "#...#/#..#./#.#../##.../#.#../#..#./#...#", "L": "#..../#..../#..../#..../#..../#..../#####",
    "M": "#...#/##.##/#.#.#/#.#.#/#...#/#...#/#...#", "N": "#...#/#...#/##..#/#.#.#/#..##/#...#/#...#",
    "O": ".###./#...#/#...#/#...#/#...#/#...#/.###.", "P": "####./#...#/#...#/####./#..../#..../#....",
    "Q": ".###./#...#/#...#/#...#/#.#.#/#..#./.##.#", "R": "####./#...#/#...#/####./#.#../#..#./#...#",
    "S": ".####/#..../#..../.###./....#/....#/####.", "T": "#####/..#../..#../..#../..#../..#../..#..",
    "U": "#...#/#...#/#...#/#...#/#...#/#...#/.###.", "V": "#...#/#...#/#...#/#...#/#...#/.#.#./..#..",
    "W": "#...#/#...#/#...#/#.#.#/#.#.#/#.#.#/.#.#.", "X": "#...#/#...#/.#.#./..#../.#.#./#...#/#...#",
    "Y": "#...#/#...#/#...#/.#.#./..#../..#../..#..", "Z": "#####/....#/...#./..#../.#.../#..../#####",
    ".": "...../...../...../...../...../.##../.##..", ",": "...../...../...../...../.##../..#../.#...",
    ":": "...../.##../.##../...../.##../.##../.....", "/": "...../....#/...#./..#../.#.../#..../.....",
    "%": "##.../##..#/...#./..#../.#.../#..##/...##", "-": "...../...../...../#####/...../...../.....",
    "+": "...../..#../..#../#####/..#../..#../.....", "(": "...#./..#../.#.../.#.../.#.../..#../...#.",
    ")": ".#.../..#../...#./...#./...#./..#../.#...", "=": "...../...../#####/...../#####/...../.....",
    "_": "...../...../...../...../...../...../#####", "'": "..#../..#../.#.../...../...../...../.....",
    "<": "...#./..#../.#.../#..../.#.../..#../...#.", ">": ".#.../..#../...#./....#/...#./..#../.#...",
    "[": ".###./.#.../.#.../.#.../.#.../.#.../.###.", "]": ".###./...#./...#./...#./...#./...#./.###.",
    "*": "...../#.#.#/.###./#####/.###./#.#.#/.....", "#": ".#.#./.#.#./#####/.#.#./#####/.#.#./.#.#.",
    "~": "...../...../.#.../#.#.#/...#./...../.....", "|": "..#../..#../..#../..#../..#../..#../..#..",
    "@": ".###./#...#/#.###/#.#.#/#.###/#..../.###.", "?": ".###./#...#/....#/...#./..#../...../..#..",
    "!": "..#../..#../..#../..#../..#../...../..#..", "µ": "...../#...#/#...#/#...#/##.##/#.#../#....",
}
_FONT = {ch: [row for row in glyph.split("/")] for ch, glyph in _GLYPHS.items()}
GLYPH_W, GLYPH_H = 5, 7


class Canvas:
    """An RGB image; coordinates are floats rounded to pixels, anything outside is clipped."""

    def __init__(self, width: int, height: int, background: Color = (255, 255, 255)) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def dot(self, x: float, y: float, color: Color) -> None:
        px, py = round(x), round(y)
        if 0 <= px < self.width and 0 <= py < self.height:
            i = (py * self.width + px) * 3
            self.pixels[i:i + 3] = bytes(color)

    def box(self, x: float, y: float, w: float, h: float, color: Color) -> None:
        x0, y0 = max(0, round(x)), max(0, round(y))
        x1, y1 = min(self.width, round(x + w)), min(self.height, round(y + h))
        if x1 <= x0:
            return
        row = bytes(color) * (x1 - x0)
        for py in range(y0, y1):
            i = (py * self.width + x0) * 3
            self.pixels[i:i + len(row)] = row

    def line(self, x1: float, y1: float, x2: float, y2: float, color: Color, width: float = 1.0,
             dash: float = 0.0) -> None:
        steps = max(1, round(max(abs(x2 - x1), abs(y2 - y1))))
        half = (max(1, round(width)) - 1) / 2
        for step in range(steps + 1):
            if dash and int(step // dash) % 2:
                continue
            t = step / steps
            x, y = x1 + (x2 - x1) * t, y1 + (y2 - y1) * t
            if half:
                self.box(x - half, y - half, 2 * half + 1, 2 * half + 1, color)
            else:
                self.dot(x, y, color)

    def disc(self, x: float, y: float, r: float, color: Color) -> None:
        for dy in range(-round(r), round(r) + 1):
            for dx in range(-round(r), round(r) + 1):
                if dx * dx + dy * dy <= r * r + 0.5:
                    self.dot(x + dx, y + dy, color)

    def text(self, x: float, y: float, text: str, color: Color, scale: int = 1, anchor: str = "start",
             vertical: bool = False) -> None:
        """Draw ``text`` with its baseline at ``y`` (``vertical``: rotated, reading bottom to top)."""
        advance = (GLYPH_W + 1) * scale
        length = advance * len(text) - scale
        offset = {"start": 0, "middle": length // 2, "end": length}.get(anchor, 0)
        x, y = round(x), round(y)  # whole pixels: a half-pixel origin would smear every glyph
        for index, char in enumerate(text.upper()):
            rows = _FONT.get(char)
            if rows is None:
                continue
            start = index * advance - offset
            for r, row in enumerate(rows):
                for c, ink in enumerate(row):
                    if ink != "#":
                        continue
                    u, v = start + c * scale, (r - GLYPH_H) * scale
                    if vertical:
                        self.box(x + v, y - u - scale, scale, scale, color)
                    else:
                        self.box(x + u, y + v, scale, scale, color)

    def to_png(self) -> bytes:
        stride = self.width * 3
        raw = b"".join(b"\x00" + bytes(self.pixels[y * stride:(y + 1) * stride]) for y in range(self.height))
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + \
            _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def text_width(text: str, scale: int = 1) -> int:
    return max(0, (GLYPH_W + 1) * scale * len(text) - scale)
