"""One self-contained HTML page per report: inline CSS, images as data URIs, no external request.

>>> r = HtmlReport("Demo")
>>> s = r.section("Checks")
>>> s.verdict("ok", "All good")
>>> "All good" in r.to_html() and "<style>" in r.to_html()
True
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import os
import re
from importlib import resources
from typing import Any

from ascendify.core.fileio import write_atomic
from ascendify.report.tables import Column, format_value

_STATUS_CLASS = {
    "ok": "ok", "pass": "ok", "match": "ok", "✓": "ok", "yes": "ok",
    "warn": "warn", "warning": "warn", "not comparable": "warn", "not proven": "warn",
    "fail": "fail", "error": "fail", "diverged": "fail", "✗": "fail", "no": "fail",
    "skip": "skip", "n/a": "skip",
}

_FILTER_JS = """
function ascFilter(input) {
  var q = input.value.toLowerCase();
  var rows = document.getElementById(input.dataset.table).tBodies[0].rows;
  for (var i = 0; i < rows.length; i++) {
    rows[i].style.display = rows[i].textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
  }
}
"""


def status_class(status: str) -> str:
    """The CSS class for a status word: ok, warn, fail or skip."""
    return _STATUS_CLASS.get(str(status).strip().lower(), "skip")


def _esc(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


class Section:
    """A titled part of the page; add content in order with the methods below."""

    def __init__(self, report: HtmlReport, title: str, anchor: str | None, level: int) -> None:
        self._report = report
        self.title = title
        self.anchor = report._unique_anchor(anchor or _slug(title))
        self.level = level
        self._parts: list[str | Section] = []

    def text(self, text: str) -> Section:
        """A paragraph of plain text (blank lines start new paragraphs)."""
        for para in str(text).split("\n\n"):
            self._parts.append(f"<p>{_esc(para)}</p>")
        return self

    def verdict(self, status: str, headline: str, detail: str | None = None) -> Section:
        """A boxed verdict with a coloured status badge (ok / warn / fail / skip...)."""
        cls = status_class(status)
        body = f'<div class="detail">{_esc(detail)}</div>' if detail else ""
        self._parts.append(
            f'<div class="verdict {cls}" data-status="{_esc(status)}"><span class="badge {cls}">{_esc(status)}</span>'
            f'<span class="headline">{_esc(headline)}</span>{body}</div>'
        )
        return self

    def kv(self, items: dict[str, Any]) -> Section:
        """A two-column list of names and values."""
        rows = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(format_value(v))}</dd>" for k, v in items.items())
        self._parts.append(f'<dl class="kv">{rows}</dl>')
        return self

    def table(
        self,
        columns: list[Column],
        rows: list[dict[str, Any]],
        *,
        highlight: Any = None,
        filter: bool | None = None,
        caption: str | None = None,
    ) -> Section:
        """A table; ``highlight(row) -> bool`` marks rows; long tables get a filter box."""
        tid = self._report._unique_anchor(f"{self.anchor}-table")
        head = "".join(f"<th>{_esc(c.title)}</th>" for c in columns)
        body = []
        for row in rows:
            cells = []
            for c in columns:
                text = format_value(row.get(c.name), c.kind)
                cls = "num" if c.kind == "number" else (f"st-{status_class(text)}" if c.kind == "status" else "")
                cells.append(f'<td class="{cls}">{_esc(text)}</td>' if cls else f"<td>{_esc(text)}</td>")
            mark = ' class="highlight"' if highlight is not None and highlight(row) else ""
            body.append(f"<tr{mark}>{''.join(cells)}</tr>")
        box = ""
        if filter or (filter is None and len(rows) > 15):
            box = (f'<div><input class="filter" type="search" placeholder="filter rows…" data-table="{tid}" '
                   f'oninput="ascFilter(this)"></div>')
            self._report._needs_js = True
        cap = f"<caption>{_esc(caption)}</caption>" if caption else ""
        self._parts.append(
            f'{box}<div class="tablewrap"><table id="{tid}">{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
        return self

    def image(self, png: bytes, caption: str = "", alt: str | None = None) -> Section:
        """A PNG image embedded as a data URI, with a caption."""
        data = base64.b64encode(png).decode("ascii")
        cap = f"<figcaption>{_esc(caption)}</figcaption>" if caption else ""
        self._parts.append(
            f'<figure><img alt="{_esc(alt or caption)}" src="data:image/png;base64,{data}">{cap}</figure>'
        )
        return self

    def code(self, text: str, first_line: int = 1, highlight: int | None = None, title: str | None = None) -> Section:
        """Source lines numbered from ``first_line``; line number ``highlight`` is marked."""
        lines = []
        for i, line in enumerate(str(text).splitlines(), start=first_line):
            cls = "line hl" if i == highlight else "line"
            lines.append(f'<span class="{cls}"><span class="ln">{i}</span>{_esc(line)}</span>')
        head = f"<div><code>{_esc(title)}</code></div>" if title else ""
        self._parts.append(f'{head}<pre class="code">{"".join(lines)}</pre>')
        return self

    def link(self, href: str, text: str | None = None) -> Section:
        """A link (relative links point at files beside the report)."""
        self._parts.append(f'<p><a href="{_esc(href)}">{_esc(text or href)}</a></p>')
        return self

    def html(self, raw: str) -> Section:
        """Raw HTML, inserted as given (the caller escapes)."""
        self._parts.append(raw)
        return self

    def section(self, title: str, anchor: str | None = None) -> Section:
        """A nested section."""
        sub = Section(self._report, title, anchor, self.level + 1)
        self._parts.append(sub)
        return sub

    def render(self) -> str:
        tag = f"h{min(self.level + 1, 6)}"
        inner = "".join(p.render() if isinstance(p, Section) else p for p in self._parts)
        return f'<section id="{self.anchor}"><{tag}>{_esc(self.title)}</{tag}>{inner}</section>'


class HtmlReport:
    """A report page: a title, sections in order, a navigation bar, and a footer with the time it was made."""

    def __init__(self, title: str, subtitle: str | None = None) -> None:
        self.title = title
        self.subtitle = subtitle
        self.sections: list[Section] = []
        self._anchors: set[str] = set()
        self._needs_js = False

    def _unique_anchor(self, base: str) -> str:
        anchor, n = base, 2
        while anchor in self._anchors:
            anchor, n = f"{base}-{n}", n + 1
        self._anchors.add(anchor)
        return anchor

    def section(self, title: str, anchor: str | None = None) -> Section:
        """A top-level section (listed in the navigation bar)."""
        s = Section(self, title, anchor, 1)
        self.sections.append(s)
        return s

    def to_html(self) -> str:
        """The whole page as one string."""
        from ascendify import __version__

        css = resources.files("ascendify.report").joinpath("report.css").read_text(encoding="utf-8")
        nav = "".join(f'<a href="#{s.anchor}">{_esc(s.title)}</a>' for s in self.sections)
        body = "".join(s.render() for s in self.sections)
        sub = f'<div class="subtitle">{_esc(self.subtitle)}</div>' if self.subtitle else ""
        js = f"<script>{_FILTER_JS}</script>" if self._needs_js else ""
        made = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        return (
            "<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f"<title>{_esc(self.title)}</title><style>{css}</style>{js}</head><body>"
            f"<header><h1>{_esc(self.title)}</h1>{sub}</header><nav>{nav}</nav><main>{body}</main>"
            f"<footer>ascendify {_esc(__version__)} · {made}</footer></body></html>\n"
        )

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the page atomically to ``path``."""
        write_atomic(path, self.to_html())
