"""What reaches a terminal from the log: its text with every non-printable character escaped.

Names, kinds and recipients are checked where swarmlog writes them (:func:`swarmlog.protocol.name_problem`),
but a log holds whatever any producer put in it: an older writer, another tool, a buggy or hostile
one. An agent name holding ESC is a terminal escape sequence (colours, a cursor move, a retitled
window); one holding a newline forges a line of ``swarmlog log``; a bidirectional override reverses
what follows it on screen. So every command's human-readable output passes text that came from the
log through :func:`printable` (``--json`` output is JSON, exact and escaped by the encoder: it is not
touched), and the CLI's log lines pass through :class:`PrintableFormatter`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

__all__ = ["CAP", "PrintableFormatter", "bounded", "offset_ranges", "printable", "printable_lines"]

CAP = 20
"""Findings of one kind a command lists one a line, at most; past it, a summary by kind with offset
ranges (:func:`bounded`). ``--json`` and ``-v`` list every one."""


def _escape(c: str) -> str:
    n = ord(c)
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"


def printable(text: object) -> str:
    """``text`` (as ``str()`` gives it) with every character ``str.isprintable`` refuses written as its
    Python escape (ESC as ``\\x1b``, a newline as ``\\x0a``, U+202E as ``\\u202e``): what a terminal
    shows is what the log holds, and nothing in it acts on the terminal. Spaces stay spaces; text that
    needs no escaping (nearly all of it) comes back as it is, checked in one C call."""
    s = text if type(text) is str else str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)


def printable_lines(text: str) -> str:
    """:func:`printable` of each line of a text swarmlog laid out in lines itself (an indented JSON
    document: its strings hold no raw newline, the encoder escaped them), its own newlines kept."""
    if text.isprintable():
        return text
    return "\n".join(map(printable, text.split("\n")))


def offset_ranges(offsets: Iterable[int], *, limit: int = 6) -> str:
    """Sorted offsets as runs of consecutive ones: ``5..9, 12, 40..1000``; past ``limit`` runs,
    ``(and N more ranges)``."""
    runs: list[list[int]] = []
    for off in sorted(set(offsets)):
        if runs and off == runs[-1][1] + 1:
            runs[-1][1] = off
        else:
            runs.append([off, off])
    text = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs[:limit])
    return text + (f" (and {len(runs) - limit} more ranges)" if len(runs) > limit else "")


def bounded(findings: Sequence[tuple[int, str, str]], *, full: bool = False, cap: int = CAP) -> list[str]:
    """Lines for a terminal of ``(offset, kind, text)`` findings: one a line up to ``cap`` (or all,
    ``full``); past it, one line per kind — how many, their offsets as ranges, the first one's text —
    so that ten thousand unreadable messages are a few lines, not ten thousand. Texts are escaped
    (:func:`printable`)."""
    if full or len(findings) <= cap:
        return [printable(text) for _, _, text in findings]
    kinds: dict[str, list[tuple[int, str]]] = {}
    for offset, kind, text in findings:
        kinds.setdefault(kind, []).append((offset, text))
    out = []
    for kind, items in kinds.items():
        out.append(printable(f"{len(items):,} × {kind}, at offsets {offset_ranges(o for o, _ in items)}; "
                             f"the first: {items[0][1]}"))
    return out


class PrintableFormatter(logging.Formatter):
    """A log line's message with non-printable characters escaped (:func:`printable`): a log message
    names agents, kinds, topics and errors that may come from the log. The traceback (and only it)
    keeps its newlines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return printable(super().formatMessage(record))
