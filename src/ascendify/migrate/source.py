"""One Python source file as bytes, text and positions: decode (PEP 263), map ``ast`` positions to offsets, encode.

``ast`` gives a node's position as (line, UTF-8 byte column); edits work on character offsets into the decoded
text. Line breaks are ``\\n``, ``\\r\\n`` or a lone ``\\r``, exactly as Python's tokenizer counts them, so CRLF files
keep their line endings untouched.

>>> s = SourceFile.from_bytes(b"x = 1\\r\\ny = 'caf\\xc3\\xa9'.upper()\\r\\n")
>>> s.offset(2, 4), s.text[s.offset(2, 4):s.offset(2, 11)]
(11, "'café'")
>>> s.newline
'\\r\\n'
"""

from __future__ import annotations

import codecs
import io
import re
import tokenize
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add

_LINE_RE = re.compile(r"\r\n|\r|\n")


class DecodeError(ValueError):
    """The bytes are not text in their declared (or the default UTF-8) encoding."""


@dataclass
class SourceFile:
    text: str
    encoding: str = "utf-8"
    bom: bool = False
    line_starts: list[int] = field(default_factory=list)
    _ascii: dict[int, bool] = field(default_factory=dict)

    @classmethod
    def from_bytes(cls, data: bytes) -> SourceFile:
        try:
            enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as e:
            raise DecodeError(str(e)) from e
        bom = enc == "utf-8-sig"
        enc_name = "utf-8" if bom else enc
        try:
            codecs.lookup(enc_name)
            text = data[len(codecs.BOM_UTF8) :].decode(enc_name) if bom else data.decode(enc_name)
        except (LookupError, UnicodeDecodeError) as e:
            raise DecodeError(f"not valid {enc_name}: {e}") from e
        return cls.from_text(text, encoding=enc_name, bom=bom)

    @classmethod
    def from_text(cls, text: str, encoding: str = "utf-8", bom: bool = False) -> SourceFile:
        s = cls(text=text, encoding=encoding, bom=bom)
        if "\r" in text:
            starts = [0]
            starts.extend(m.end() for m in _LINE_RE.finditer(text))
        else:  # "\n" only (most files): the line lengths added up, without a Python step per line
            starts = list(accumulate(map(add, map(len, text.split("\n")), repeat(1)), initial=0))
            starts.pop()  # the "line" after the text's end
        s.line_starts = starts
        return s

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data

    @property
    def newline(self) -> str:
        m = _LINE_RE.search(self.text)
        return m.group(0) if m else "\n"

    def line_text(self, lineno: int) -> str:
        """Line ``lineno`` (1-based) without its line break."""
        start = self.line_starts[lineno - 1]
        end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, lineno: int, col_bytes: int) -> int:
        """Character offset of (1-based line, UTF-8 byte column) as ``ast`` reports positions."""
        start = self.line_starts[lineno - 1]
        ascii_line = self._ascii.get(lineno)
        if ascii_line is None:
            ascii_line = self.line_text(lineno).isascii()
            self._ascii[lineno] = ascii_line
        if ascii_line:
            return start + col_bytes
        line = self.line_text(lineno)
        return start + len(line.encode("utf-8")[:col_bytes].decode("utf-8", errors="replace"))

    def span(self, node) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node) -> str:
        a, b = self.span(node)
        return self.text[a:b]

    def line_of(self, offset: int) -> int:
        """1-based line number of a character offset."""
        return bisect_right(self.line_starts, offset) or 1

    def line_count(self) -> int:
        n = len(self.line_starts)
        return n - 1 if self.text.endswith(("\n", "\r")) else n
