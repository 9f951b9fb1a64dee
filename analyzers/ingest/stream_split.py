"""Inflate a compressed trace straight into parse ranges: its JSON text is written once, not twice.

A plain .json is hashed, then its event list is copied range by range into '[...]' files for
DuckDB (parse.write_parts). An inflated .json.gz or archive member used to take the same way
after it was written out whole: 2 GB written per GB of trace. Here the inflating stream goes
through a RangeSplitter instead:

- the text before the event list stays in memory until the top-level keys up to
  `"traceEvents": [` are read (layout.scan_head on the part seen so far);
- the event list is written into '[...]' range files, cut at event boundaries as the text
  streams past (the boundary check of layout.split_points, with the 1 MiB it may look ahead kept in memory);
- once the stream ends, the end of the list and the metadata after it are found in the last
  range file (layout's tail scan), which is cut there.

Whatever does not take that shape (no event list near the start, a list that is not closed,
metadata after the list longer than the last range) is written out as one plain file instead,
for the ordinary path to read and report exactly as before.
"""
from __future__ import annotations

import bisect
import os
import tempfile
from dataclasses import dataclass

from . import layout
from .parse import copy_range
from .layout import (HEAD_WINDOW, MAX_META_BYTES, HeadIncomplete, Layout, LayoutError, find_events_end,
                     last_non_ws, scan_head)

LOOKAHEAD = 1 << 20       # how far past a candidate cut next_event_start may read to check it
TAIL_BLOCK = 64 << 10     # the end of the text is read back in blocks at least this big


@dataclass
class SplitTrace:
    """An inflated trace held as ready parse ranges: layout offsets are those of its JSON text."""
    layout: Layout
    parts: list[str]


class RangeSplitter:
    """Takes the inflated text chunk by chunk (feed), then finish() gives a SplitTrace, or the
    path of one plain file holding the whole text when the text is not a trace it can split.

    part_bytes: the range size aimed at (a cut is made at the first event boundary past it).
    The files are made in tmpdir; abort() removes them.
    """

    def __init__(self, tmpdir: str, part_bytes: int):
        self.tmpdir = tmpdir
        self.part_bytes = max(1, part_bytes)
        self.head = bytearray()          # text before the event list is found (then: up to its '[')
        self.pending = bytearray()       # event-list text not yet written to a range
        self.parts: list[str] = []
        self.part_offsets: list[int] = []   # offset in the text of each range's first byte
        self.separators: list[bytes] = []   # the text cut out after each closed range (',' + blanks)
        self.plain_path: str | None = None
        self._out = None                 # the open range (or plain) file
        self._part_len = 0
        self._written = 0                # text offset of the next byte written to a range
        self._size = 0
        self._events_start = -1
        self._meta: dict = {}
        self._bare = False
        self._next_try = 0               # head length at which to run the head scan again

    # -- feeding ---------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self.plain_path is not None:
            self._out.write(chunk)
            return
        if self._events_start < 0:
            self.head += chunk
            if len(self.head) >= self._next_try:
                self._try_head(complete=False)
            return
        self.pending += chunk
        self._drain(final=False)

    def _try_head(self, complete: bool) -> None:
        try:
            start, meta, bare = scan_head(self.head, len(self.head), complete=complete)
        except HeadIncomplete:
            # not yet: wait for more text, up to the longest metadata a trace may have; the scan
            # starts over each time, so it runs again once the head has doubled
            if len(self.head) > MAX_META_BYTES + HEAD_WINDOW:
                self._go_plain()
            self._next_try = 2 * len(self.head)
            return
        except LayoutError:
            self._go_plain()    # not a trace: the ordinary path reads it and says why
            return
        self._events_start, self._meta, self._bare = start, meta, bare
        self.pending = self.head[start + 1:]
        del self.head[start + 1:]
        self._written = start + 1
        self._open_part()
        self._drain(final=complete)

    # -- ranges ----------------------------------------------------------------------------
    def _open_part(self) -> None:
        fd, path = tempfile.mkstemp(dir=self.tmpdir, suffix=".part.json")
        self.parts.append(path)
        self.part_offsets.append(self._written)
        self._out = os.fdopen(fd, "wb")
        self._out.write(b"[")
        self._part_len = 0

    def _write(self, n: int) -> None:
        with memoryview(self.pending) as view:
            self._out.write(view[:n])
        del self.pending[:n]
        self._part_len += n
        self._written += n

    def _drain(self, final: bool) -> None:
        """Write what is pending into ranges, cutting at the first event boundary past
        part_bytes; keep LOOKAHEAD bytes back unless the text has ended."""
        while self.pending:
            need = self.part_bytes - self._part_len
            if need > 0:
                self._write(min(need, len(self.pending)))
                continue
            hi = len(self.pending) if final else len(self.pending) - LOOKAHEAD
            if hi <= 0:
                return
            cut = layout.next_event_start(self.pending, 0, hi)
            if cut is None:
                self._write(hi)          # no boundary here (a long event): the range grows
                continue
            # a cut sits on `}\s*,\s*{`: only the comma and blanks lie between the two ranges, so
            # joining them with a ',' gives the same JSON back (parse.join_parts, _reassemble)
            comma = self.pending.rfind(b",", 0, cut)
            self._write(comma)
            self.separators.append(bytes(self.pending[:cut - comma]))
            del self.pending[:cut - comma]
            self._written += cut - comma
            self._out.write(b"]")
            self._out.close()
            self._open_part()

    # -- the end -----------------------------------------------------------------------------
    def finish(self) -> SplitTrace | str:
        if self.plain_path is None and self._events_start < 0:
            self._try_head(complete=True)        # all of the text fitted in the head
        if self.plain_path is not None:
            self._out.close()
            self._out = None
            return self.plain_path
        self._drain(final=True)
        self._out.close()
        self._out = None
        try:
            events_end, tail_meta = self._close_last_range()
        except LayoutError:
            return self._reassemble()
        meta = dict(self._meta)
        meta.update(tail_meta)
        return SplitTrace(Layout(self._size, self._events_start, events_end, meta), self.parts)

    def _close_last_range(self) -> tuple[int, dict]:
        """Find the list's closing ']' over the end of the text, cut the range holding it right
        after it, and drop the ranges after that one (cuts made in metadata after the list)."""
        tail = _TextTail(self)
        if self._bare:
            end = last_non_ws(tail, self._size)
            if end <= self._events_start or tail[end] != ord("]"):
                raise LayoutError("the event list is not closed")
            meta: dict = {}
        else:
            end, meta = find_events_end(tail, self._size, self._events_start)
        index = max(k for k, offset in enumerate(self.part_offsets) if offset <= end)
        with open(self.parts[index], "r+b") as fh:
            fh.truncate(end - self.part_offsets[index] + 2)     # its '[' + text up to the ']'
        for part in self.parts[index + 1:]:
            _unlink(part)
        del self.parts[index + 1:], self.part_offsets[index + 1:], self.separators[index:]
        return end, meta

    def _go_plain(self) -> None:
        fd, path = tempfile.mkstemp(dir=self.tmpdir, suffix=".json")
        self.plain_path = path
        self._out = os.fdopen(fd, "wb")
        self._out.write(self.head)
        self.head = bytearray()

    def _reassemble(self) -> str:
        """One plain file with the whole text (separators between ranges become a bare ','):
        the ordinary path then reads it and reports what is wrong with it."""
        fd, path = tempfile.mkstemp(dir=self.tmpdir, suffix=".json")
        with os.fdopen(fd, "wb") as out:
            out.write(self.head)                    # up to and including the list's '['
            for index, part in enumerate(self.parts):
                closed = index < len(self.parts) - 1
                out.flush()
                with open(part, "rb") as src:       # its content, without our brackets
                    copy_range(src.fileno(), out.fileno(), 1, os.path.getsize(part) - (2 if closed else 1))
                if index < len(self.separators):
                    out.write(self.separators[index])
        self._remove_parts()
        self.plain_path = path
        return path

    def _remove_parts(self) -> None:
        for part in self.parts:
            _unlink(part)
        self.parts = []

    def abort(self) -> None:
        """Remove every file made so far (after a failure: a truncated stream, a cap)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        self._remove_parts()
        if self.plain_path is not None:
            _unlink(self.plain_path)
            self.plain_path = None


class _TextTail:
    """The inflated text, read back from its end as far as a search asks: the ranges' contents
    (each without its own brackets) with the separators cut out between them put back, after
    the head up to the list's '['. Indexing and slicing take text offsets. Only the part asked
    for is read (in blocks of TAIL_BLOCK), so a huge last range costs no more than the window."""

    def __init__(self, splitter: RangeSplitter):
        self.sp = splitter
        self.size = splitter._size
        self.base = self.size           # text offset of data[0]
        self.data = b""

    def _segment(self, k: int, lo: int, hi: int) -> bytes:
        """text[lo:hi] within range k (its file content, then the separator cut out after it)."""
        sp = self.sp
        start = sp.part_offsets[k]
        closed = k < len(sp.parts) - 1
        inner_end = start + os.path.getsize(sp.parts[k]) - (2 if closed else 1)
        out = b""
        if lo < inner_end:
            with open(sp.parts[k], "rb") as fh:
                out = os.pread(fh.fileno(), min(hi, inner_end) - lo, 1 + lo - start)
        if hi > inner_end:
            sep = sp.separators[k]
            out += sep[max(lo, inner_end) - inner_end:hi - inner_end]
        return out

    def _load(self, offset: int) -> None:
        if offset >= self.base:
            return
        offset = max(0, min(offset, self.base - TAIL_BLOCK))
        sp = self.sp
        pieces: list[bytes] = []        # read back to front, joined once
        while offset < self.base:
            k = bisect.bisect_right(sp.part_offsets, self.base - 1) - 1
            if k < 0:                   # the head: the text up to and including the list's '['
                pieces.append(bytes(sp.head[offset:self.base]))
                self.base = offset
                break
            lo = max(offset, sp.part_offsets[k])
            pieces.append(self._segment(k, lo, self.base))
            self.base = lo
        self.data = b"".join(reversed(pieces)) + self.data

    def __getitem__(self, key):
        if isinstance(key, slice):
            start = 0 if key.start is None else key.start
            stop = self.size if key.stop is None else min(key.stop, self.size)
            self._load(start)
            return self.data[start - self.base:stop - self.base]
        self._load(key)
        return self.data[key - self.base]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
