"""Where things are inside one trace file, found without parsing the event array in Python.

A Kineto trace is `{"schemaVersion": 1, ..., "traceEvents": [ ...millions of events... ], ...}`,
with `traceEvents` first, last or in between. The event array is handed to DuckDB as byte
ranges; the few top-level metadata keys around it are read here with the standard JSON decoder,
window by window. The file is decoded as latin-1 for the structural scan so that string offsets
equal byte offsets (JSON structure is ASCII); metadata values are re-decoded as UTF-8.
"""
from __future__ import annotations

import json
import mmap
import os
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
# Bytes read from the first timestamp of the event list on to date a file (a few hundred events).
_HEAD_SAMPLE_BYTES = 1 << 16
# How far a file is read for its first timestamp (the events before it may carry huge names or args)
_HEAD_MAX_BYTES = 1 << 30
_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?)')
HEAD_WINDOW = 1 << 20          # first look at the head; grows while a metadata value is longer
TAIL_WINDOW = 1 << 18          # first look at the tail after the events; grows ×4 when needed
MAX_META_BYTES = 64 << 20      # metadata outside traceEvents larger than this is not a Kineto trace
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_NON_WS = re.compile(rb"[^ \t\r\n]")
_NON_WS_TEXT = re.compile(r"[^ \t\r\n]")
SINGLE_RANGE_BYTES = 2 * (1 << 16)   # an event list shorter than this is never cut into ranges


class LayoutError(ValueError):
    """The file is not a trace we can read; the message is for the user, in plain words."""


class HeadIncomplete(LayoutError):
    """scan_head(complete=False) ran out of text: the start of the stream is not enough yet."""


@dataclass
class Layout:
    size: int
    events_start: int             # offset of the '[' that opens the event array
    events_end: int               # offset of its matching ']'
    meta: dict[str, Any] = field(default_factory=dict)   # every top-level key except traceEvents

    @property
    def body_bytes(self) -> int:
        return self.events_end - self.events_start - 1


def _skip_ws(text: str, pos: int) -> int:
    found = _NON_WS_TEXT.search(text, pos)     # in C: whitespace runs may be megabytes long
    return found.start() if found else max(pos, len(text))


def _decode_value(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except RecursionError:
        raise LayoutError("a top-level value is nested too deeply to read") from None


def _read(mm: mmap.mmap, start: int, stop: int) -> str:
    return mm[start:stop].decode("latin-1")


def _utf8_key(key: str) -> str:
    """Keys were decoded from latin-1 text (offsets = bytes); re-read their bytes as UTF-8."""
    if key.isascii():
        return key
    try:
        return key.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return key


def _kind_of(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def scan_layout(path: str | os.PathLike) -> Layout:
    """Find the traceEvents array and read the metadata around it. Raises LayoutError."""
    size = os.path.getsize(path)
    if size == 0:
        raise LayoutError("the file is empty")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        start, meta, bare = scan_head(mm, size)
        if bare:
            # Chrome's "JSON array format": the file is the event list itself.
            end = last_non_ws(mm, size)
            if chr(mm[end]) != "]":
                raise LayoutError("the JSON is truncated or malformed (the event list is not closed)")
            return Layout(size, start, end, {})
        end, tail_meta = find_events_end(mm, size, start)
        meta.update(tail_meta)
        return Layout(size, start, end, meta)


def scan_head(buf, size: int, complete: bool = True) -> tuple[int, dict[str, Any], bool]:
    """Where the event list opens: (offset of its '[', the top-level keys before it, whether the
    file is a bare event array). Raises LayoutError.

    buf (bytes-like, or an mmap) holds the first `size` bytes of the file; complete=False says
    they are only its start (a stream still being inflated): then a value that reaches the end
    of buf is not trusted, and a LayoutError may only mean that more text is needed.
    """
    if not complete and size < 3 and b"\xef\xbb\xbf".startswith(bytes(buf[:size])):
        raise HeadIncomplete("more text needed")   # maybe a byte-order mark, cut short
    bom = 3 if bytes(buf[:3]) == b"\xef\xbb\xbf" else 0    # a UTF-8 byte-order mark some editors add
    found = _NON_WS.search(buf, bom, size)    # leading whitespace may be long: searched in C
    if found is None:
        if not complete:
            raise HeadIncomplete("more text needed")
        raise LayoutError("the file holds only whitespace, not JSON")
    first = found.start()
    if first > MAX_META_BYTES:   # the head is read from byte 0: whitespace this long would be held in memory
        raise LayoutError(f"the file starts with over {MAX_META_BYTES >> 20} MiB of whitespace; this does not "
                          "look like a trace")
    opener = chr(buf[first])
    if opener == "[":
        return first, {}, True
    if opener != "{":
        raise LayoutError("this is not JSON (it does not start with '{' or '[')")
    return (*_scan_object_head(buf, size, first, complete), False)


def last_non_ws(mm: mmap.mmap, size: int) -> int:
    pos = size - 1
    while pos >= 0 and chr(mm[pos]) in _WS:
        pos -= 1
    return pos


def _scan_object_head(buf, size: int, brace: int, complete: bool) -> tuple[int, dict[str, Any]]:
    meta: dict[str, Any] = {}
    # the window counts from the opening brace: whitespace before it is not metadata
    window = min(size, brace + HEAD_WINDOW)
    text = _read(buf, 0, window)
    pos = brace + 1

    def out_of_text(message: str) -> None:
        """The window ends too early: read a 4x larger one, else say why it cannot go on."""
        nonlocal window, text
        if window < size:
            if window - brace >= MAX_META_BYTES:
                raise LayoutError("a top-level value other than traceEvents is larger than "
                                  f"{MAX_META_BYTES >> 20} MiB; this does not look like a trace")
            window = min(size, brace + (window - brace) * 4)
            text = _read(buf, 0, window)
            return
        if not complete:
            raise HeadIncomplete(message)
        raise LayoutError(message)

    while True:
        key_start = pos     # each key is read again from here after the window grew
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            out_of_text("the JSON is truncated (the top-level object never closes)")
            pos = key_start
            continue
        ch = text[pos]
        if ch == "}":
            if "traceEvents" not in meta:
                raise LayoutError("this JSON is not a trace: it has no 'traceEvents' list")
            value = meta["traceEvents"]
            raise LayoutError(f"'traceEvents' is {_kind_of(value)}, not a list of events")
        if ch == ",":
            pos = _skip_ws(text, pos + 1)
        try:
            key, pos = _DECODER.raw_decode(text, pos)
        except RecursionError:      # a deeply nested value where a key belongs
            raise LayoutError("the JSON is truncated or malformed near the start of the file") from None
        except json.JSONDecodeError as exc:
            if _ends_in_window(exc, text):
                out_of_text("the JSON is truncated or malformed near the start of the file")
                pos = key_start
                continue
            raise LayoutError("the JSON is truncated or malformed near the start of the file") from None
        if not isinstance(key, str):
            raise LayoutError("the JSON is truncated or malformed near the start of the file")
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            out_of_text("the JSON is truncated or malformed near the start of the file")
            pos = key_start
            continue
        if text[pos] != ":":
            raise LayoutError("the JSON is truncated or malformed near the start of the file")
        pos = _skip_ws(text, pos + 1)
        if pos >= len(text):
            out_of_text("the JSON is truncated or malformed near the start of the file")
            pos = key_start
            continue
        if key == "traceEvents" and text[pos] == "[":
            meta.pop("traceEvents", None)
            return pos, meta
        # A metadata value: decode it, growing the window if it is long.
        while True:
            try:
                value, stop = _DECODER.raw_decode(text, pos)
                if stop >= len(text) and (window < size or not complete):
                    raise json.JSONDecodeError("window", text, stop)  # a number may continue
                break
            except json.JSONDecodeError:
                out_of_text("the JSON is truncated or malformed (a top-level value never ends)")
            except RecursionError:
                raise LayoutError("a top-level value is nested too deeply to read") from None
        meta[_utf8_key(key)] = _decode_value(buf[pos:stop])
        pos = stop


def _ends_in_window(exc: json.JSONDecodeError, text: str) -> bool:
    """A key that may have failed to decode only because the window cut it: its string runs to
    the end, or the error is in its last few characters (a \\uXXXX escape cut short)."""
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(text) - 16


def _object_tail(text: str, pos: int, final: int) -> dict[str, Any] | None:
    """Parse `, "k": v, ... }` (the rest of the top-level object) from pos; None when it is not."""
    out: dict[str, Any] = {}
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            return None
        ch = text[pos]
        if ch == "}":
            return out if pos == final else None
        if ch != ",":
            return None
        try:
            key, pos = _DECODER.raw_decode(text, _skip_ws(text, pos + 1))
            if not isinstance(key, str):
                return None
            pos = _skip_ws(text, pos)
            if pos >= len(text) or text[pos] != ":":
                return None
            start = _skip_ws(text, pos + 1)
            _, pos = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            return None
        out[key] = (start, pos)


def find_events_end(mm: mmap.mmap, size: int, start: int) -> tuple[int, dict[str, Any]]:
    """Offset of the ']' closing the event array at `start`, and the metadata after it.

    A ']' whose remaining text parses as the rest of the top-level object can only close a
    top-level value (JSON brackets balance), so the earliest such ']' after `start` is the end of
    traceEvents; only the tail window is examined, grown until one is found.
    """
    final = last_non_ws(mm, size)
    if final <= start or chr(mm[final]) != "}":
        raise LayoutError("the JSON is truncated (the file ends before the trace is closed)")
    window = TAIL_WINDOW
    while True:
        lo = max(start, size - window)
        text = _read(mm, lo, size)
        best: tuple[int, dict] | None = None
        idx = len(text)
        while True:
            idx = text.rfind("]", 0, idx)
            if idx < 0 or lo + idx <= start:
                break
            tail = _object_tail(text, idx + 1, final - lo)
            if tail is not None and "traceEvents" not in tail:
                best = (idx, tail)
        trusted = best is not None and (lo == start or window >= MAX_META_BYTES
                                        or _closes_objects(text, best[0]))
        if trusted:
            idx, tail = best
            meta = {_utf8_key(k): _decode_value(mm[lo + a:lo + b]) for k, (a, b) in tail.items()}
            return lo + idx, meta
        if lo == start:
            raise LayoutError("the JSON is truncated or malformed (the traceEvents list is not closed)")
        if window >= MAX_META_BYTES:
            limit = f"{MAX_META_BYTES / (1 << 20):g} MiB"
            raise LayoutError(f"nothing in the last {limit} of the file closes the traceEvents list: the "
                              f"metadata after it is larger than {limit} (the limit for a trace), or the JSON "
                              "is malformed")
        window *= 4


def _closes_objects(text: str, idx: int) -> bool:
    """In a partial window, trust a candidate end only when it closes a list of objects."""
    j = idx - 1
    while j >= 0 and text[j] in _WS:
        j -= 1
    return j >= 0 and text[j] in "}["


def next_event_start(mm: mmap.mmap, lo: int, hi: int) -> int | None:
    """Offset of a '{' after lo that opens a whole trace event: `}, {` also occurs inside args
    (lists of objects), so the object there must decode (within 1 MiB) and carry a 'ph' key.
    Each candidate is decoded from 4 KiB first, then 64 KiB, then 1 MiB: an event holding a
    long list of small objects has a candidate at each of them."""
    for match in _EVENT_BOUNDARY.finditer(mm, lo, hi):
        start = match.end() - 1
        limit = min(start + (1 << 20), hi + (1 << 20))
        for span in (4 << 10, 64 << 10, 1 << 20):
            stop = min(start + span, limit)
            text = mm[start:stop].decode("latin-1")
            try:
                obj, _ = _DECODER.raw_decode(text)
            except json.JSONDecodeError as exc:
                if stop >= limit or not _ends_in_window(exc, text):
                    break       # malformed, not just cut short by the span: not an event's start
                continue        # cut short by the span: a wider look decides
            except RecursionError:
                break           # nested too deeply to be an event's start
            if isinstance(obj, dict) and "ph" in obj:
                return start
            break
    return None


def split_points(path: str | os.PathLike, layout: Layout, parts: int) -> list[tuple[int, int]]:
    """Cut the event array body into about `parts` byte ranges at event boundaries.

    Each range [a, b) is the text between two top-level events (no separating comma), so
    '[' + range + ']' is itself a JSON array. A cut that lands inside a nested list of objects
    makes a range invalid JSON; the loader notices and re-reads the file as one range.
    """
    body_start, body_end = layout.events_start + 1, layout.events_end
    ranges: list[tuple[int, int]] = []
    if parts <= 1 or body_end - body_start < SINGLE_RANGE_BYTES:
        return [(body_start, body_end)]
    step = (body_end - body_start) // parts
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        cur = body_start
        for k in range(1, parts):
            target = max(cur, body_start + k * step)
            cut = next_event_start(mm, target, min(body_end, target + (8 << 20)))
            if cut is None:
                continue
            comma = mm.rfind(b",", cur, cut)
            ranges.append((cur, comma))                 # up to the comma between the two events
            cur = cut                                   # start at the '{' of the next event
        ranges.append((cur, body_end))
    return ranges


def head_start_us(path: str | None, parts: tuple[str, ...], events_start: int) -> float | None:
    """The median ts of the first events of a file (a few non-timed metadata events with ts 0
    do not move a median), read from its event list on until the first timestamps come; None
    when it holds none (in its first _HEAD_MAX_BYTES) or cannot be read."""
    def chunks():
        for name, offset in ([(p, 0) for p in parts] if parts else [(path, events_start)] if path else []):
            with open(name, "rb") as fh:
                fh.seek(offset)
                while chunk := fh.read(_HEAD_SAMPLE_BYTES):
                    yield chunk
    try:
        return stream_start_us(chunks())
    except OSError:
        return None


def stream_start_us(chunks) -> float | None:
    """head_start_us of an event list given as successive byte chunks: read until its first
    timestamp, then _HEAD_SAMPLE_BYTES from there."""
    window, scanned = b"", 0
    for chunk in chunks:
        window += chunk
        scanned += len(chunk)
        match = _TS.search(window)
        if match is None:
            if scanned >= _HEAD_MAX_BYTES:
                return None
            window = window[-64:]     # a "ts" cut by the chunk's end is found with the next chunk
            continue
        window = window[match.start():]
        if len(window) >= _HEAD_SAMPLE_BYTES:
            break
    return sample_start_us(window)


def sample_start_us(sample: bytes) -> float | None:
    """head_start_us of the first bytes of an event list (a compressed file's, read by inflating its start)."""
    values = [float(v) for v in _TS.findall(sample[:_HEAD_SAMPLE_BYTES])]
    return statistics.median(values) if values else None
