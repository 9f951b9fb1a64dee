"""Text from traces and from users, made safe for where it is shown: a terminal, Markdown, HTML, CSV.

Trace text (kernel and op names, file and archive member names, run names derived from them) is
untrusted: it can carry terminal escape sequences (ESC ] 52 writes the clipboard, ESC [ 2J clears
the screen), bidi overrides that show text in another order (U+202E), NUL, undecodable file-name
bytes (Python hands them over as lone surrogates), bare URLs a Markdown renderer turns into links,
spreadsheet formulas, and sizes nobody can read (a 200 KB op name). Every writer goes through
these helpers; none of them changes the stored text, only how it is shown.
"""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

# How much of one trace-controlled string (a name) a summary or a report shows.
TRACE_TEXT_LIMIT = 200
# The most of a whole finding summary a report shows (a backstop for names the analyses did not clip).
SUMMARY_LIMIT = 1000
ELLIPSIS = "…"

# Unicode categories a terminal or a page must never receive raw: controls (C0 with NUL and ESC,
# DEL, C1 with CSI and OSC), format characters (bidi overrides and isolates, zero-width ones),
# lone surrogates, and the line/paragraph separators.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Lone surrogates U+DC80..U+DCFF are bytes a file name's encoding could not decode
# (PEP 383 surrogateescape): shown as the byte they stand for.
_ESCAPED_BYTES = range(0xDC80, 0xDD00)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code in _ESCAPED_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def terminal_safe(value: Any) -> str:
    """str(value) with every control, format and lone-surrogate character shown as a Python-style
    escape ('\\x1b', '\\u202e', '\\xff' for an undecodable file-name byte), so it prints on one
    line, encodes as UTF-8 and cannot drive the terminal or reorder what is shown."""
    text = str(value)
    if text.isprintable():          # the common case, checked in C
        return text
    return "".join(_escape_char(ch) if unicodedata.category(ch) in _INVISIBLE_CATEGORIES else ch for ch in text)


def terminal_safe_lines(value: Any) -> str:
    """terminal_safe for text of several lines: its line breaks kept, everything else escaped."""
    return "\n".join(terminal_safe(line) for line in str(value).split("\n"))


def is_utf8_text(text: str) -> bool:
    """False for a str holding lone surrogates (an argument or file name that was not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clip(value: Any, limit: int = TRACE_TEXT_LIMIT) -> str:
    """str(value) cut to at most limit characters, the cut marked with an ellipsis."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


_LINE_BREAKS = re.compile(r"[\t\n\r\v\f]")


def _page_text(value: Any) -> str:
    """Text for a report page: line breaks and tabs become spaces (harmless there, unlike on a
    terminal), every other invisible character is shown escaped."""
    return terminal_safe(_LINE_BREAKS.sub(" ", str(value)))


# --- Markdown -------------------------------------------------------------------------------

# A URL scheme before its ':', "www" before its (maybe escaped) '.', and the spot before an '@'
_AUTOLINK = re.compile(r"(?i)(?:https?|ftp|file|mailto)(?=:)|www(?=\\?\.)|(?=@)")
_ZWSP = "\u200b"


def no_autolink(text: str) -> str:
    """Break what GFM renderers turn into links by themselves (URL schemes, www., e-mail @) with a
    zero-width space: Streamlit's renderer links them even when their punctuation is escaped."""
    return _AUTOLINK.sub(lambda m: m.group(0) + _ZWSP, text)


# Trace text: every character that starts Markdown markup (emphasis, code, links, headings,
# tables, raw HTML) is backslash-escaped.
_MARKDOWN_TRACE_SPECIALS = re.compile(r"([\\`*_\[\]<>#|])")
# The team's own notes: only what would make raw HTML, links, code or break the line's table/list,
# so URLs keep their '_' and '#' and stay one copyable, clickable link.
_MARKDOWN_NOTE_SPECIALS = re.compile(r"([\\`*\[\]<>|])")


def markdown_text(value: Any, trace: bool = True) -> str:
    """One line of Markdown showing value as plain text.

    trace True (text from a trace): all markup escaped and no autolinks. trace False (the team's
    own review notes): markup escaped too, but URLs left whole so a ticket link still works."""
    text = _page_text(value)
    if trace:
        return no_autolink(_MARKDOWN_TRACE_SPECIALS.sub(r"\\\1", text))
    return _MARKDOWN_NOTE_SPECIALS.sub(r"\\\1", text)


# Everything Streamlit's Markdown renderer gives a meaning to (GFM, its :color[...] directives,
# $ LaTeX, ~ strikethrough), escaped for st.markdown and friends.
_STREAMLIT_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def page_markdown(value: Any) -> str:
    """Trace text made inert for Streamlit's st.markdown/caption/alerts: every character its
    renderer reads as markup escaped, controls and bidi overrides shown escaped, no bare URL
    linked."""
    return no_autolink(_STREAMLIT_MARKDOWN_SPECIALS.sub(r"\\\1", _page_text(value)))


def markdown_cell(value: Any) -> str:
    """A Markdown table cell of trace text: no pipe or newline can break the table, no raw HTML,
    link, emphasis or code span gets through, and no bare URL becomes a link."""
    text = html.escape(_page_text(value), quote=False)
    for ch in ("\\", "|", "[", "]", "*", "_", "~", "`"):
        text = text.replace(ch, "\\" + ch)
    return no_autolink(text)


# --- HTML and CSV ---------------------------------------------------------------------------

def html_text(value: Any) -> str:
    """value as HTML text or attribute content: escaped, with controls and bidi overrides shown."""
    return html.escape(_page_text(value), quote=True)


# OWASP's CSV injection advice: a cell a spreadsheet would read as a formula is prefixed with a quote.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value for a CSV cell that no spreadsheet evaluates: text starting with = + - @, a tab or a
    carriage return gets a leading "'"; numbers and None pass unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


# --- the team's own notes: their links kept whole and live ----------------------------------
# A review note is typed by the team (a ticket link, an owner), not read from a trace: its URLs must
# survive a copy byte for byte, so they are written as links of their own instead of being broken
# with zero-width spaces like trace text. What a URL ends at, as GFM's autolinks: whitespace, < > "
# ` | and a trailing . , : ; ! ? ) ' ] that closes the sentence rather than the URL.
_NOTE_URL = re.compile(r"""https?://[^\s<>"`|]*[^\s<>"`|.,:;!?)'\]]""")   # | ends it: a table cell's edge


def _note_parts(value: Any) -> list[tuple[str, bool]]:
    """(text, is_url) pieces of a note, on one line (controls and bidi overrides shown escaped)."""
    text, parts, at = _page_text(value), [], 0
    for match in _NOTE_URL.finditer(text):
        if match.start() < at:      # inside a URL a closing parenthesis extended
            continue
        url, end = match.group(0), match.end()
        while text[end:end + 1] == ")" and url.count("(") > url.count(")"):   # .../Foo_(bar)
            url, end = url + ")", end + 1
        if match.start() > at:
            parts.append((text[at:match.start()], False))
        parts.append((url, True))
        at = end
    if at < len(text):
        parts.append((text[at:], False))
    return parts


def note_markdown(value: Any) -> str:
    """A team note as one line of Markdown: its text inert (markup escaped), each http(s) URL an
    explicit <autolink>, whose characters Markdown takes literally (no escapes inside), so the
    rendered link and its copied text are the URL byte for byte."""
    return "".join(f"<{part}>" if is_url else markdown_text(part, trace=False) for part, is_url in _note_parts(value))


def note_html(value: Any) -> str:
    """A team note as HTML text: escaped, each http(s) URL a link to itself (href escaped too)."""
    return "".join(f'<a href="{html.escape(part, quote=True)}">{html.escape(part, quote=True)}</a>' if is_url
                   else html_text(part) for part, is_url in _note_parts(value))
