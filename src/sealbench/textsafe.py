"""Text fit for a terminal: what the solver wrote must not drive the reader's terminal.

A solver controls its stdout, stderr, refuse reason and file names, and sealbench shows parts
of them (`show`, `runs`, reports, refusal reasons). Raw, an `ESC[2J` clears the reader's screen,
an OSC sequence retitles the window or writes a hyperlink, `\\r` overwrites a line, and a bidi
override reorders what is shown. Every such character is shown as a visible escape instead.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls (0x9b is a one-byte CSI), bidi controls
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, single_line: bool = False) -> str:
    """text with every control character (ESC, CR, BEL, C1, bidi overrides...) written as a
    visible escape such as `\\x1b`; newlines and tabs are kept, or escaped too when
    single_line (table cells, one-line messages)."""
    safe = _UNSAFE.sub(_visible, text)
    if single_line:
        safe = safe.replace("\n", "\\n").replace("\t", "\\t")
    return safe


# what reads as a rate: a percentage (any percent sign, or the words), a share written 0.93 or
# .93, a count of a count ("50/54", "50 of 54"), and the words a rate comes with
_FIGURE = re.compile(
    r"(?:\d+(?:[.,]\d+)?|[.,]\d+)\s*(?:[%\u066a\ufe6a\uff05\u2030]|per\s*-?\s*cent\b"
    r"|percent\b|pct\b)"
    r"|(?<![\w.,])0?[.,]\d+\b"
    r"|\b\d+\s*(?:/|\bof\b|\bout\s+of\b)\s*\d+\b"
    r"|\b(?:mean|means|ci95|interval|intervals|rate|rates|score|scores|accuracy)\b",
    re.IGNORECASE)
WITHHELD = "[withheld]"


def rate_free(text: str) -> str:
    """text with everything that reads as a rate replaced by `[withheld]`.

    Why: before the null-pack gate nothing may show a rate, and a refused run shows what a
    control's solver wrote (its refuse reason, its stderr tail, the names of files it wrote)
    in the gate's reasons: a solver whose control misbehaves on purpose could otherwise put
    "93.0% (95% CI 88–97%, n = 54)" on the refused run's page and in its refusal message.
    The words are still in the ledger, whole (`sealbench show RUN --task ID`).
    """
    return _FIGURE.sub(WITHHELD, text)


ELLIPSIS = "…"


def clip(text: str, limit: int) -> str:
    """text cut to at most ``limit`` characters, at a word boundary and marked with "…".

    Why: a table cell cut mid-word with no mark reads as a different, whole word ("could not
    open fil" becomes a statement); the mark says there is more (`sealbench show RUN --task ID`
    prints it whole). A single word longer than half the limit is cut inside it rather than
    leaving a near-empty cell.
    """
    if len(text) <= limit:
        return text
    keep = max(limit - len(ELLIPSIS), 0)
    cut = text[:keep]
    space = cut.rfind(" ")
    if not text[keep].isspace() and space >= limit // 2:  # the cut fell inside a word
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS
