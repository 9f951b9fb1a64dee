"""Turn what the user gave (files, directories, .gz, .zip, .tar.gz) into plain JSON files on disk.

Compressed data is inflated into our own temp directory under caps checked WHILE inflating
(a bomb is stopped at the cap, never written in full). Archive members are never extracted by
their own name: each is streamed into a temp file we name, so `../` or absolute member paths and
symlink members cannot write anywhere (they are refused all the same, with an error naming them).
The BLAKE3 hash of each file's JSON text is computed on the way, for run identity. Inflated
text goes straight into parse ranges (stream_split.py), so it is written once.
"""
from __future__ import annotations

import mmap
import os
import posixpath
import re
import stat
import tarfile
import threading
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Callable

import blake3
from isal import igzip

from analyzers.common.model import FileError
from .layout import SINGLE_RANGE_BYTES, Layout
from .parse import part_counts, remove_parts
from .ranks import utf8_text
from .stream_split import RangeSplitter, SplitTrace
from analyzers.common.tempfiles import temp_dir_failure
from analyzers.common.units import human_bytes

CHUNK = 8 << 20
HASH_CHUNK = 32 << 20   # big enough for blake3 to spread one update over all cores
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
TRACE_SUFFIXES = (".json", ".json.gz")
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


@dataclass(frozen=True)
class Limits:
    """Caps that keep bad or hostile input from filling the disk or memory.

    - max_total_bytes: JSON bytes one ingest call may inflate in all (16 GiB: ~4x the largest
      real traces we have heard of, and still fits the temp disk of a workstation).
    - max_ratio / ratio_floor: a compressed input (a .gz file, and a whole archive as well as
      each of its members) may inflate beyond ratio_floor (64 MiB) only while it stays under
      max_ratio x its compressed size. Kineto JSON compresses 10-30x
      (the shared traces: 13x-26x); gzip's own ceiling is ~1030x, so 200x leaves real traces
      a wide margin and stops a bomb after ratio_floor or 200x its size, whichever is larger.
    - part_bytes: the largest parse range; files are cut into ranges of about equal size, a
      multiple of the thread count in all (parse.part_counts). DuckDB's JSON reader holds about
      a range per thread in memory: at 1 GB, 16 MiB ranges peaked at 383-399 MiB against
      438-473 MiB with 32-256 MiB ones, as fast; 4 MiB ranges cost 5% more CPU and 721 MiB.
    - max_files_per_dir: .json/.json.gz files a directory or an archive may hold (8192 ranks:
      the largest jobs whose traces anyone loads whole); more means the wrong folder (a home
      directory's package caches took minutes to read and refuse file by file).
    """
    max_total_bytes: int = 16 << 30
    max_ratio: float = 200.0
    ratio_floor: int = 64 << 20
    part_bytes: int = 16 << 20
    max_files_per_dir: int = 8192


@dataclass
class RankFile:
    display: str          # name used in errors: "dir/rank0.json" or "runs.zip:rank0.json"
    member: str           # the file's own name (zip member or base name), for ranks.file_name
    path: str | None      # plain JSON on disk (the user's file, or our inflated temp copy); None
                          # when the text was inflated straight into parse ranges (parts)
    content_hash: str     # BLAKE3 of the JSON text, hex
    size: int
    layout: Layout | None = None   # known already when the text was split as it was inflated
    parts: tuple[str, ...] = ()    # its '[...]' parse ranges, in order
    where: str = ""       # its path inside the archive or the given directory ("rank3/trace.json"):
                          # a rank may be named by a folder
    origin: str = ""      # the input it came from, as given (a file, directory or archive)
    compressed: str = ""  # a .json.gz its ingest task inflates (collect's defer_compressed): path None,
                          # no parts, content_hash "", layout from its head only (tail keys missing)
    head_start_us: float | None = None   # for a compressed one: layout.head_start_us of its head


@dataclass
class _Reading:
    """What every input of one collect() call shares."""
    tmpdir: str
    budget: "_Budget"
    threads: int      # the parser's threads: inflated text is cut into a multiple of them
    defer_plain_hash: bool = False   # plain files get content_hash "" (a cluster task hashes them)
    defer_compressed: bool = False   # .json.gz files are only peeked at (a cluster task inflates them)
    confine_to: str | None = None    # read only files under this directory (a data root), each opened once
    pinned: list[int] | None = None  # the descriptors of those files, closed by the caller after the ingest


def _inflated(display: str, member: str, result: SplitTrace | str, digest: str, size: int,
              where: str = "") -> RankFile:
    if isinstance(result, SplitTrace):
        return RankFile(display, member, None, digest, size, layout=result.layout,
                        parts=tuple(result.parts), where=where)
    return RankFile(display, member, result, digest, size, where=where)


class InputError(Exception):
    """A problem with one input, reported as FileError(display, message)."""

    def __init__(self, display: str, message: str):
        super().__init__(message)
        self.display = display
        self.message = message


class _ArchiveCap:
    """The inflated bytes one archive may give in all: the ratio rule over the whole archive, so
    that many members each under the per-member cap cannot add up to a bomb."""

    def __init__(self, display: str, compressed_size: int, limits: Limits):
        self.display = display
        self.cap = _ratio_cap(compressed_size, limits)
        self.max_ratio = limits.max_ratio
        self.used = 0

    def refusal(self) -> "ArchiveRefused":
        return ArchiveRefused(self.display, f"refused: the archive inflates to more than {human_bytes(self.cap, significant=3)}, "
                                        f"over {self.max_ratio:.0f}x its compressed size (a decompression bomb?)")

    def take(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise self.refusal()


def _ratio_cap(compressed_size: int, limits: Limits) -> int:
    return max(limits.ratio_floor, int(limits.max_ratio * max(compressed_size, 1)))


def _too_many_members(display: str, count: str, limits: Limits) -> "ArchiveRefused":
    return ArchiveRefused(display, f"refused: the archive holds {count} .json files (the limit is "
                                   f"{limits.max_files_per_dir}); give the traces of one job")


def _discard_from(files: list[RankFile], start: int) -> None:
    """Forget the archive members found from index start on (their archive was refused part-way)
    and free the temp space of their inflated text (an archive member is never the user's file)."""
    for member in files[start:]:
        remove_parts([*member.parts, *([member.path] if member.path else [])])
    del files[start:]


class ArchiveRefused(InputError):
    """A limit of the whole archive was passed: none of its members is loaded."""


class _Budget:
    """JSON bytes this ingest call may still take in; shared by the reading threads."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Reserve n more bytes; False (and nothing reserved) when that would pass the cap."""
        with self._lock:
            if self.used + n > self.limits.max_total_bytes:
                return False
            self.used += n
            return True


def _is_trace_name(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES)


def _is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _peek(path: Path, n: int = 4) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None) if hasattr(mmap.mmap, "madvise") else None


def _hash_file(path: Path) -> str:
    """BLAKE3 of the file, hashed straight from the page cache (mmap) on every core: 0.27 CPU s
    and 0.14 s per GB on 2 cores, where sha256 took 0.63-0.89 s on one (it ran before the parse,
    with the second core idle). BLAKE3 is a cryptographic hash, so a crafted file cannot pass
    for another run's."""
    digest = blake3.blake3(max_threads=blake3.blake3.AUTO)
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return digest.hexdigest()
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            for start in range(0, len(mm), HASH_CHUNK):   # blake3 drops the GIL per update
                digest.update(view[start:start + HASH_CHUNK])
                # unmap what was hashed: mapped pages count in the process's RSS (they stay in
                # the page cache for the parse)
                if _DONTNEED is not None:
                    mm.madvise(_DONTNEED, start, min(HASH_CHUNK, len(mm) - start))
    return digest.hexdigest()


def _inflate_to_temp(stream: IO[bytes], display: str, compressed_size: int, reading: _Reading,
                     gzip_inside: bool, size_hint: int | None = None,
                     archive: _ArchiveCap | None = None) -> tuple[SplitTrace | str, str, int]:
    """Inflate a (decompressing) stream into parse ranges (or one plain file), hashing, under the caps.

    size_hint: the inflated size when the container says it (zip, tar, gzip's trailer): the
    ranges are then sized so that their number is a multiple of the parser's threads.
    archive: the cap of the archive the stream is a member of (its refusal names the archive).
    """
    limits = reading.budget.limits
    per_file_cap = _ratio_cap(compressed_size, limits)
    digest = blake3.blake3(max_threads=blake3.blake3.AUTO)
    splitter = RangeSplitter(reading.tmpdir, _range_bytes(size_hint, reading.threads, limits.part_bytes))
    written = 0
    source: IO[bytes] = igzip.GzipFile(fileobj=stream, mode="rb") if gzip_inside else stream
    try:
        while True:
            try:
                chunk = source.read(CHUNK)
            except EOFError:
                raise InputError(display, f"{_BAD_GZIP} is truncated (the file ends before the "
                                          "compressed stream does)") from None
            except Exception as exc:  # noqa: BLE001 - zlib, isal, zipfile and tarfile each raise their own
                raise InputError(display, f"{_BAD_COMPRESSED} is corrupt ({_plain(exc)})") from None
            if not chunk:
                break
            written += len(chunk)
            if written > per_file_cap:
                raise InputError(display, f"refused: it inflates to more than {human_bytes(per_file_cap, significant=3)}, "
                                          f"over {limits.max_ratio:.0f}x its compressed size "
                                          "(a decompression bomb?)")
            if archive is not None:
                archive.take(len(chunk))
            if not reading.budget.take(len(chunk)):
                raise InputError(display, "refused: the inputs inflate to more than "
                                          f"{human_bytes(limits.max_total_bytes, significant=3)} in all")
            digest.update(chunk)
            splitter.feed(chunk)
        result = splitter.finish()
    except OSError as exc:      # writing the ranges: the temp directory's disk, not the input
        splitter.abort()
        raise InputError(display, temp_dir_failure(reading.tmpdir, exc)) from None
    except BaseException:
        splitter.abort()
        raise
    return result, digest.hexdigest(), written


_BAD_GZIP = "the gzip data"
_BAD_COMPRESSED = "the compressed data"

MIN_RANGE_BYTES = 4 << 20   # DuckDB costs ~1 ms per range file: 1,024 ranges of 72 KB took 1.3 s


def _range_bytes(size_hint: int | None, threads: int, part_bytes: int) -> int:
    """The range size to cut an inflated file into: part_bytes, or for a file whose size is known,
    equal ranges a multiple of the threads in number (so a lone file keeps every thread busy),
    but not smaller than MIN_RANGE_BYTES (a run of many small files has enough ranges anyway)."""
    if not size_hint or size_hint <= 0:
        return part_bytes
    if size_hint < SINGLE_RANGE_BYTES:
        return size_hint + 1
    even = -(-size_hint // part_counts([size_hint], max(1, threads), part_bytes)[0])
    return max(even, min(part_bytes, MIN_RANGE_BYTES))


def _gzip_size_hint(path: Path, compressed_size: int) -> int | None:
    """The inflated size from a gzip file's trailer (ISIZE: the size mod 4 GiB, of its last
    member); None where it cannot be right (smaller than the compressed data: > 4 GiB inflated)."""
    if compressed_size < 18:
        return None
    with open(path, "rb") as fh:
        fh.seek(-4, os.SEEK_END)
        size = int.from_bytes(fh.read(4), "little")
    return size if size >= compressed_size else None


def _plain(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


def _gz_holds_tar(path: Path) -> bool:
    try:
        with igzip.open(path, "rb") as fh:
            head = fh.read(512)
    except Exception:  # noqa: BLE001 - corrupt gzip: reported when it is inflated as a trace
        return False
    return len(head) >= 262 and head[257:262] == b"ustar"


def _plain_file(path: Path, display: str, budget: _Budget, where: str, hashed: bool = True) -> RankFile:
    size = path.stat().st_size
    if not budget.take(size):
        raise InputError(display, f"refused: the inputs exceed {human_bytes(budget.limits.max_total_bytes, significant=3)} in all")
    return RankFile(display, path.name, str(path), _hash_file(path) if hashed else "", size, where=where)


def hash_file(path: str | os.PathLike) -> str:
    """A plain rank file's content_hash (where collect deferred it: defer_plain_hash)."""
    return _hash_file(Path(path))


def _gzip_file(path: Path, display: str, reading: _Reading, where: str) -> RankFile:
    compressed = path.stat().st_size
    try:
        with open(path, "rb") as raw:
            out, digest, size = _inflate_to_temp(raw, display, compressed, reading, gzip_inside=True,
                                                 size_hint=_gzip_size_hint(path, compressed))
    except InputError as exc:
        trailing = _trailing_data(path) if exc.message.startswith((_BAD_GZIP, _BAD_COMPRESSED)) else None
        if trailing is None:
            raise
        what = "1 byte that is not gzip data follows" if trailing == 1 else \
            f"{trailing} bytes that are not gzip data follow"
        raise InputError(display, f"{what} the end of the gzip stream (something appended to the file?); "
                                  "recompress the trace") from None
    return _inflated(display, _strip_gz(path.name), out, digest, size, where=_strip_gz(where))


GZIP_PEEK_BYTES = 4 << 20    # a deferred .json.gz: how much of its start is inflated to read its head


def _peeked_gzip(path: Path, display: str, where: str) -> RankFile | None:
    """A .json.gz left for its task to inflate, from the head of its text (the metadata before
    traceEvents, the first events' time); None when the start does not show that (a huge head, a
    damaged file): then it is inflated here, which reports what is wrong."""
    from .layout import LayoutError, sample_start_us, scan_head

    try:
        with igzip.open(path, "rb") as fh:
            head = fh.read(GZIP_PEEK_BYTES)
        start, meta, _ = scan_head(head, len(head), complete=len(head) < GZIP_PEEK_BYTES)
    except (OSError, EOFError, LayoutError, ValueError):
        return None
    head_start = sample_start_us(head[start:])
    if head_start is None and len(head) == GZIP_PEEK_BYTES:   # first events too long to date it from here
        return None
    return RankFile(display, _strip_gz(path.name), None, "", path.stat().st_size,
                    layout=Layout(len(head), start, start, meta), where=_strip_gz(where), compressed=str(path),
                    head_start_us=head_start)


def _trailing_data(path: Path) -> int | None:
    """How many bytes follow the file's last complete gzip member, when they are neither another
    member nor zero padding (which gzip readers skip); None when the gzip data itself is cut
    short or corrupt. Inflates the file again, in bounded pieces: only a failed read asks."""
    inflater = zlib.decompressobj(wbits=31)
    with open(path, "rb") as fh:
        chunk = fh.read(CHUNK)
        while chunk:
            try:
                inflater.decompress(chunk, CHUNK)
            except zlib.error:
                return None
            chunk = inflater.unconsumed_tail
            if not inflater.eof:
                chunk = chunk or fh.read(CHUNK)
                continue
            rest = inflater.unused_data          # after a member: another member, padding or junk
            if len(rest) < len(GZIP_MAGIC):
                rest += fh.read(CHUNK)
            if rest.startswith(GZIP_MAGIC):
                inflater, chunk = zlib.decompressobj(wbits=31), rest
                continue
            tail = rest + fh.read()
            return len(tail) if tail.strip(b"\0") else None
    return None


def _strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def _member_problem(name: str) -> str | None:
    posix = PurePosixPath(name.replace("\\", "/"))
    if posix.is_absolute() or (len(name) > 1 and name[1] == ":"):
        return "refused: the archive member has an absolute path"
    if ".." in posix.parts:
        return "refused: the archive member's path leaves the archive ('..')"
    return None


def _zip_members(path: Path, display: str, reading: _Reading,
                 files: list[RankFile], errors: list[FileError]) -> None:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(display, f"not a readable zip archive ({_plain(exc)})") from None
    except UnicodeDecodeError:
        raise InputError(display, "not a readable zip archive (a member's name is flagged as UTF-8 "
                                  "but is not valid UTF-8)") from None
    with zf:
        limits = reading.budget.limits
        traces = [info for info in zf.infolist() if not info.is_dir() and _is_trace_name(info.filename)]
        if len(traces) > limits.max_files_per_dir:
            raise _too_many_members(display, str(len(traces)), limits)
        cap = _ArchiveCap(display, path.stat().st_size, limits)
        if sum(info.file_size for info in traces) > cap.cap:   # the sizes it declares: refused unread
            raise cap.refusal()
        found_before = len(files)
        try:
            _read_zip_members(zf, display, reading, cap, files, errors)
        except ArchiveRefused:
            _discard_from(files, found_before)
            raise


def _read_zip_members(zf: zipfile.ZipFile, display: str, reading: _Reading, cap: _ArchiveCap,
                      files: list[RankFile], errors: list[FileError]) -> None:
    for info in zf.infolist():
        name = utf8_text(info.filename)
        shown = f"{display}:{name}"
        if info.is_dir():
            continue
        problem = _member_problem(name)
        mode = info.external_attr >> 16
        if problem is None and stat.S_ISLNK(mode):
            problem = "refused: the archive member is a symbolic link"
        if problem is None and _is_archive_name(name):
            problem = "refused: nested archives are not read; extract the inner archive and load it directly"
        if problem is None and not _is_trace_name(name):
            continue  # README, images, ... beside the traces
        if problem:
            errors.append(FileError(shown, problem))
            continue
        try:
            with zf.open(info) as member:
                _inflate_member(member, shown, name, info.compress_size, info.file_size, reading, cap, files, errors)
        except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError) as exc:
            errors.append(FileError(shown, f"could not read this zip member ({_plain(exc)})"))


def _inflate_member(stream: IO[bytes], shown: str, name: str, compressed_size: int, declared_size: int,
                    reading: _Reading, cap: _ArchiveCap, files: list[RankFile], errors: list[FileError]) -> None:
    """Inflate one archive member into files; its own problem goes to errors, while a limit of
    the whole archive (ArchiveRefused) is raised to refuse the archive."""
    gzip_inside = name.lower().endswith(".gz")
    try:
        out, digest, size = _inflate_to_temp(stream, shown, compressed_size, reading, gzip_inside,
                                             size_hint=None if gzip_inside else declared_size, archive=cap)
    except ArchiveRefused:
        raise
    except InputError as exc:
        errors.append(FileError(exc.display, exc.message))
        return
    files.append(_inflated(shown, PurePosixPath(_strip_gz(name)).name, out, digest, size, where=name))


def _tar_members(path: Path, display: str, reading: _Reading,
                 files: list[RankFile], errors: list[FileError]) -> None:
    compressed_total = path.stat().st_size
    try:
        tf = tarfile.open(path, mode="r|*")   # streaming: members are read in order, never seeked
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(display, f"not a readable tar archive ({_plain(exc)})") from None
    limits = reading.budget.limits
    cap = _ArchiveCap(display, compressed_total, limits)
    found_before = len(files)
    traces = 0
    try:
        with tf:
            for info in tf:
                name = utf8_text(info.name)   # undecodable bytes arrive as surrogate escapes
                shown = f"{display}:{name}"
                if info.isdir():
                    continue
                if _is_trace_name(name):
                    traces += 1
                    if traces > limits.max_files_per_dir:   # a stream: refused at the first one over
                        raise _too_many_members(display, f"more than {limits.max_files_per_dir}", limits)
                problem = _member_problem(name)
                if problem is None and (info.issym() or info.islnk()):
                    problem = "refused: the archive member is a link"
                if problem is None and not info.isfile():
                    problem = "refused: the archive member is not a regular file"
                if problem is None and _is_archive_name(name):
                    problem = "refused: nested archives are not read; extract the inner archive and load it directly"
                if problem is None and not _is_trace_name(name):
                    continue
                if problem:
                    errors.append(FileError(shown, problem))
                    continue
                member = tf.extractfile(info)
                if member is None:
                    continue
                # The ratio is judged against the whole archive's compressed size: tar members
                # carry no compressed size of their own.
                _inflate_member(member, shown, name, compressed_total, info.size, reading, cap, files, errors)
    except ArchiveRefused:
        _discard_from(files, found_before)
        raise
    except (tarfile.TarError, OSError, EOFError) as exc:
        errors.append(FileError(display, f"the tar archive is truncated or corrupt ({_plain(exc)})"))


def _one_file(path: Path, display: str, where: str, reading: _Reading,
              files: list[RankFile], errors: list[FileError]) -> None:
    magic = _peek(path)
    lower = path.name.lower()
    found_before, errors_before = len(files), len(errors)
    if magic.startswith(ZIP_MAGIC) or (lower.endswith(".zip") and not magic.startswith(GZIP_MAGIC)):
        _zip_members(path, display, reading, files, errors)
    elif magic.startswith(GZIP_MAGIC):
        if lower.endswith((".tar.gz", ".tgz")) or _gz_holds_tar(path):
            _tar_members(path, display, reading, files, errors)
        else:
            peeked = _peeked_gzip(path, display, where) if reading.defer_compressed else None
            files.append(peeked or _gzip_file(path, display, reading, where))
            return
    elif lower.endswith(".tar"):
        _tar_members(path, display, reading, files, errors)
    else:
        files.append(_plain_file(path, display, reading.budget, where, hashed=not reading.defer_plain_hash))
        return
    if len(files) == found_before and len(errors) == errors_before:   # an archive with nothing to load
        errors.append(FileError(display, "the archive holds no .json or .json.gz trace files"))


def natural_key(text: str) -> list:
    """Sort key putting rank2 before rank10 (digit runs compare as numbers)."""
    return [(0, int(piece), "") if piece.isdigit() else (1, 0, piece) for piece in re.split(r"(\d+)", text) if piece]


_Job = tuple[Path, str, str, str]   # (file, name in messages, path inside the given folder, input as given)


def _distinct_names(todo: list[_Job]) -> list[_Job]:
    """Files given one by one are named by their base name in messages, unless two share it
    (a/trace.json and b/trace.json): those are named as the user typed them."""
    seen: dict[str, int] = {}
    for _, display, _, _ in todo:
        seen[display] = seen.get(display, 0) + 1
    return [(path, utf8_text(given) if seen[display] > 1 and Path(given).expanduser() == path else display, where, given)
            for path, display, where, given in todo]


def is_url(given: str) -> bool:
    """A trace input named by an fsspec URL (s3://bucket/job/, memory://..., https://...), not a path."""
    return "://" in given and not given.lower().startswith("file://") and given.split("://", 1)[0].isidentifier()


def redact_url(given: str) -> str:
    """A URL as it may be shown and stored: without user:password@ and without its query (a
    presigned URL's signature) or fragment; other text unchanged."""
    if not is_url(given):
        return given
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(given)
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return given.split("://", 1)[0] + "://…"


def _url_secrets(url: str) -> list[str]:
    """The parts of url that may hold a secret (its user:password, query and fragment), longest first."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return [url.split("://", 1)[1]] if "://" in url else [url]
    found = [parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else "", parts.query, parts.fragment]
    return sorted((f for f in found if f), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """text (an error message that may quote url) with url's secrets replaced by '…'."""
    for secret in _url_secrets(url):
        text = text.replace(secret, "…")
    return text


# The fsspec protocols a trace input may name: object stores, the web, HDFS and fsspec's memory
# (tests). Others (reference://, dbfs://, dir://, jupyter://, ...) need arguments a URL cannot
# carry, or wrap other file systems: refused by name.
URL_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "http", "https", "hdfs", "webhdfs",
                 "memory")


def url_problem(url: str) -> str | None:
    """Why a trace input URL is refused before anything is read, or None."""
    protocol = url.split("://", 1)[0].lower()
    if protocol not in URL_PROTOCOLS:
        return (f"{protocol}:// is not a storage protocol TraceDoctor reads traces from (it reads "
                f"{', '.join(p + '://' for p in URL_PROTOCOLS if p != 'memory')})")
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    if "@" in netloc:
        return ("credentials in the URL (user:password@) are not used: give them as the protocol's own "
                "settings (for s3://, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile)")
    return None


def fetch_url(url: str, into: Path, limits: Limits) -> Path:
    """Copy the trace files a URL names (a file, or a folder's .json/.json.gz files) into `into`,
    keeping the last part of the URL's path as the name a local load would show; InputError
    when it cannot be read or holds more than the limits allow. No secret of the URL (user:password,
    a presigned URL's query) is in a name or message."""
    shown = redact_url(url)
    problem = url_problem(url)
    if problem:
        raise InputError(shown, f"refused: {problem}")
    try:
        import fsspec
        fs, root = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise InputError(shown, f"reading {url.split('://')[0]}:// URLs needs a package that is not installed "
                              f"({exc.name or exc})") from None
    except Exception as exc:   # noqa: BLE001 (any file system's own refusal; its text may quote the URL)
        raise InputError(shown, f"not a URL this machine can read ({scrub(_plain(exc), url)})") from None
    root = root.rstrip("/")
    name = posixpath.basename(redact_url(url).rstrip("/").split("://", 1)[-1].split("/", 1)[-1]) or "trace"
    target = into / name
    try:
        if fs.isdir(root):
            found = sorted(f for f in fs.find(root) if _is_trace_name(posixpath.basename(f)))
            if not found:
                raise InputError(shown, "the folder holds no .json or .json.gz trace files")
            if len(found) > limits.max_files_per_dir:
                raise InputError(shown, f"refused: the folder holds {len(found)} .json files (the limit is "
                                      f"{limits.max_files_per_dir}); give the folder of one job's traces")
            sizes = fs.sizes(found)
            if sum(int(size or 0) for size in sizes) > limits.max_total_bytes:
                raise InputError(shown, f"refused: its files hold more than {limits.max_total_bytes >> 30} GiB")
            for remote in found:
                relative = posixpath.normpath(posixpath.relpath(remote, root))
                local = target / relative
                if relative.startswith("../") or relative == ".." or posixpath.isabs(relative) or \
                        not local.resolve().is_relative_to(target.resolve()):
                    raise InputError(shown, f"refused: an object name leads outside the folder ({relative!r})")
                local.parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(remote, str(local))
        elif fs.isfile(root):
            if int(fs.size(root) or 0) > limits.max_total_bytes:
                raise InputError(shown, f"refused: it holds more than {limits.max_total_bytes >> 30} GiB")
            into.mkdir(parents=True, exist_ok=True)
            fs.get_file(root, str(target))
        else:
            raise InputError(shown, "no such file or folder")
    except InputError:
        raise
    except Exception as exc:   # noqa: BLE001 (a file system's error, whatever its class; never its traceback)
        raise InputError(shown, f"could not be read ({scrub(_plain(exc), url)})") from None
    return target


_pin_lock = threading.Lock()


def _pin(path: Path, display: str, reading: _Reading) -> Path:
    """path opened once and checked to lie under reading.confine_to, given back as a path that
    reaches that opened file only: a link in this ingest's own directory to /proc/<pid>/fd/<n>
    (the name kept, for the format; other processes of this machine, a local cluster's workers,
    reach it too). A link swapped in after the check cannot redirect any later read. Where
    there is no /proc the real path is checked and the file read by name."""
    root = Path(reading.confine_to)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        real = os.readlink(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else os.path.realpath(path)
        if not Path(real).is_relative_to(root):
            raise InputError(display, "a link that leads outside the data root")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(display, "not a regular file")
        if not os.path.isdir("/proc/self/fd"):
            os.close(fd)
            return path
        with _pin_lock:
            reading.pinned.append(fd)
            holder = Path(reading.tmpdir) / "pinned" / str(len(reading.pinned))
        holder.mkdir(parents=True)
        (holder / path.name).symlink_to(f"/proc/{os.getpid()}/fd/{fd}")
        return holder / path.name
    except BaseException:
        if fd not in (reading.pinned or []):
            os.close(fd)
        raise


def collect(paths: list, tmpdir: str, limits: Limits,
            progress: Callable[[str, str, float], None] | None = None,
            threads: int = 1, defer_plain_hash: bool = False,
            defer_compressed: bool = False, confine_to: str | None = None,
            pinned: list[int] | None = None, skip_files=frozenset()) -> tuple[list[RankFile], list[FileError]]:
    """Every rank file the inputs hold, as plain JSON on disk or (inflated ones) as parse ranges
    for `threads` parser threads, plus the inputs that failed. defer_plain_hash: plain files are
    not read here (content_hash ""): the tasks that parse them hash them (ingest/partitioned.py);
    defer_compressed: likewise a .json.gz is only peeked at (RankFile.compressed), its task inflates it.
    confine_to: read only files that lie under this directory: each is opened once, checked where
    it really is and read through that descriptor only (appended to `pinned`; the caller closes
    them after the ingest), so a link swapped in after a check leads nowhere."""
    if confine_to is not None:
        confine_to = os.path.realpath(confine_to)
        pinned = [] if pinned is None else pinned
    reading = _Reading(tmpdir, _Budget(limits), threads, defer_plain_hash, defer_compressed, confine_to, pinned)
    files: list[RankFile] = []
    errors: list[FileError] = []
    todo: list[_Job] = []
    for index, given in enumerate(paths):
        path = Path(given).expanduser()
        if is_url(str(given)):
            try:
                path = fetch_url(str(given), Path(tmpdir) / "fetched" / str(index), limits)
            except InputError as exc:
                errors.append(FileError(exc.display, exc.message))
                continue
        if path.is_dir():
            found = sorted((p for p in path.rglob("*") if p.is_file() and _is_trace_name(p.name)
                            and p not in skip_files),
                           key=lambda p: natural_key(p.relative_to(path).as_posix()))
            if not found:
                errors.append(FileError(str(given), "the directory holds no .json or .json.gz trace files"))
            if len(found) > limits.max_files_per_dir:
                errors.append(FileError(str(given), f"refused: the directory holds {len(found)} .json files (the "
                                                    f"limit is {limits.max_files_per_dir}); give the folder of "
                                                    "one job's traces"))
                continue
            # names in messages and in the store must be valid UTF-8, whatever bytes the file system holds
            todo.extend((p, utf8_text(str(p.relative_to(path.parent))), utf8_text(p.relative_to(path).as_posix()),
                         str(given)) for p in found)
        elif path.is_file():
            todo.append((path, utf8_text(path.name), utf8_text(path.name), str(given)))
        elif path.exists():
            errors.append(FileError(str(given), "not a regular file or directory"))
        else:
            errors.append(FileError(str(given), "no such file or directory"))
    todo = _distinct_names(todo)

    def read_one(job: _Job) -> tuple[list[RankFile], list[FileError]]:
        path, display, where, given = job
        found: list[RankFile] = []
        failed: list[FileError] = []
        try:
            if reading.confine_to is not None:
                path = _pin(path, display, reading)
            _one_file(path, display, where, reading, found, failed)
            for rank_file in found:
                rank_file.origin = given
        except InputError as exc:
            failed.append(FileError(exc.display, exc.message))
        except OSError as exc:
            failed.append(FileError(display, f"could not read the file ({exc.strerror or _plain(exc)})"))
        return found, failed

    if progress:
        progress("reading", "", 0.0)
    # Hashing and inflating release the GIL: several rank files are read on all cores. Results
    # come back in input order, and progress is reported from the caller's thread only (UI
    # toolkits such as Streamlit refuse calls from other threads).
    workers = max(1, min(len(todo), os.cpu_count() or 1, 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for index, (found, failed) in enumerate(pool.map(read_one, todo)):
            files += found
            errors += failed
            if progress:
                progress("reading", todo[index][1], (index + 1) / len(todo))
    return files, errors


def default_name(paths: list) -> str:
    """The first input's base name without trace/archive suffixes; "+N" when there are more."""
    if not paths:
        return "run"
    base = Path(redact_url(str(paths[0])).rstrip("/\\")).name
    for suffix in (".json.gz", ".tar.gz", ".tgz", ".json", ".zip", ".gz", ".tar"):
        if base.lower().endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    if base.endswith(".pt.trace"):
        base = base[: -len(".pt.trace")]
    return base + (f" (+{len(paths) - 1})" if len(paths) > 1 else "")
