"""Uploads that stream to disk: a browser component sends each file in slices to an HTTP route of
the dashboard's own server, which appends them to a file in an upload directory. The page then
ingests the files from disk, as the CLI would.

Why not st.file_uploader: it holds every upload in the server's memory (a 560 MB file peaked the
server at 1.37 GB before ingest even began, and loading it at 3.73 GB). Here the server holds at
most one write buffer per request, whatever the file's size, and a dropped connection resumes
from the bytes already on disk.

The route is served by Streamlit's Starlette server: app/Home.py hands `routes()` to
streamlit.starlette.App, which `streamlit run app/Home.py` serves. A page gets an upload ticket
(open_ticket: a 256-bit secret, issued only to a session whose role may upload) and gives it to
its component; the route accepts a slice only with a live ticket, so it is as closed as the
page, and no cookie is involved (nothing for another site to ride on). A ticket opened by a
token session carries that token's hash, and the route asks the tokens file on every slice
whether it still may upload: a revoked token's upload stops at its next slice.
"""
from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from analyzers.ingest.sources import Limits
from analyzers.common.tempfiles import make_upload_dir, remove_temp_dir

MAX_UPLOAD_ENV = "TRACEDOCTOR_MAX_UPLOAD_MB"
DEFAULT_MAX_UPLOAD_MB = 4096          # one load's files together; multi-rank traces are often GBs
MAX_UPLOAD_TOTAL_ENV = "TRACEDOCTOR_MAX_UPLOAD_TOTAL_MB"
DEFAULT_MAX_UPLOAD_TOTAL_MB = 16384   # every upload on the server at once, all users together
SLICE_BYTES = 8 << 20                 # what the browser sends per request
WRITE_BYTES = 1 << 20                 # what the route buffers before a write: its memory per request
MAX_FILES = Limits().max_files_per_dir   # per load: as many as a directory or archive load takes
MAX_NAME_BYTES = 200                  # a stored name's UTF-8 bytes (file systems allow 255)
TICKET_IDLE_S = 6 * 3600              # an upload untouched this long is dropped with its files
ROUTE = "/api/upload/{file_id}"
TICKET_HEADER = "X-TraceDoctor-Upload"
_FILE_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")


class UploadRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def max_upload_bytes() -> int:
    try:
        return max(1, int(float(os.environ.get(MAX_UPLOAD_ENV) or DEFAULT_MAX_UPLOAD_MB))) << 20
    except ValueError:
        return DEFAULT_MAX_UPLOAD_MB << 20


def max_total_upload_bytes() -> int:
    try:
        return max(1, int(float(os.environ.get(MAX_UPLOAD_TOTAL_ENV) or DEFAULT_MAX_UPLOAD_TOTAL_MB))) << 20
    except ValueError:
        return DEFAULT_MAX_UPLOAD_TOTAL_MB << 20


def safe_file_name(name: str) -> str:
    """The base name of what the browser says a file is called, never a path (both separators
    and control characters stripped), at most MAX_NAME_BYTES of UTF-8 with its extension kept
    (`.json.gz` and all, which ingest reads the format from); a name with nothing left becomes
    'upload'."""
    base = re.split(r"[\\/]", name)[-1]
    base = "".join(ch for ch in base if ch.isprintable()).strip()
    if base in ("", ".", ".."):
        return "upload"
    if len(base.encode("utf-8", "replace")) <= MAX_NAME_BYTES:
        return base
    match = re.search(r"(\.[A-Za-z0-9]{1,8}){1,2}$", base)
    suffix = match.group(0) if match and len(match.group(0)) < len(base) else ""
    room = MAX_NAME_BYTES - len(suffix)
    stem = base[: len(base) - len(suffix)].encode("utf-8", "replace")[:room].decode("utf-8", "ignore")
    return (stem.rstrip() or "upload") + suffix


@dataclass
class UploadedFile:
    file_id: str
    name: str           # as the browser named it (base name only)
    path: Path
    size: int           # declared by the browser before the first byte
    received: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def complete(self) -> bool:
        return self.received == self.size


@dataclass
class UploadTicket:
    ticket_id: str
    token_sha256: str | None   # the token session that opened it (token mode), checked on every slice
    directory: Path
    owner: str | None = None   # the user who opened it: all of one user's open uploads share one cap
    last_used: float = field(default_factory=time.monotonic)
    files: dict[str, UploadedFile] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_file(self, file_id: str, name: str, size: int) -> UploadedFile:
        """The file file_id of this upload, registered on its first slice within the caps."""
        with self._lock:
            known = self.files.get(file_id)
            if known is not None:
                if known.size != size:
                    raise UploadRefused(400, "the file changed size during its upload; drop it again")
                return known
            if len(self.files) >= MAX_FILES:
                raise UploadRefused(413, f"one load takes at most {MAX_FILES} files")
            declared = sum(f.size for f in self.files.values()) + size
            if size < 0 or declared > max_upload_bytes():
                raise UploadRefused(413, f"over the upload limit of {max_upload_bytes() >> 20} MB for one load; "
                                         "for bigger traces, load them by path or with the command line")
            mine, everyone = _declared_elsewhere(self)
            if mine + declared > max_upload_bytes():
                raise UploadRefused(413, f"over the upload limit of {max_upload_bytes() >> 20} MB for one user's "
                                         "open uploads together; finish or leave the others first")
            if everyone + declared > max_total_upload_bytes():
                raise UploadRefused(507, "the server holds as many uploads as it takes at once; try again once "
                                         "others have loaded")
            free = shutil.disk_usage(self.directory).free
            if size > free:
                raise UploadRefused(507, f"the server's disk has {free >> 20} MB free, this file needs {size >> 20} MB")
            target = self.directory / file_id / safe_file_name(name)
            target.parent.mkdir(exist_ok=True)   # a retry after a failed first slice finds it there
            target.touch()
            uploaded = UploadedFile(file_id, target.name, target, size)
            self.files[file_id] = uploaded
            return uploaded

    def completed(self) -> list[UploadedFile]:
        with self._lock:
            return [f for f in self.files.values() if f.complete]

    def pending(self) -> list[UploadedFile]:
        with self._lock:
            return [f for f in self.files.values() if not f.complete]

    def shown_name(self, path: str) -> str:
        """A path inside this upload as the user knows it: the file's own name (plus any archive
        member after it), never the server's upload directory."""
        prefix = str(self.directory) + os.sep
        if not path.startswith(prefix):
            return path
        inner = path[len(prefix):]
        return inner.split(os.sep, 1)[1] if os.sep in inner else inner


# An uploaded file's server path, as ingest records it in a run's source: <tmp>/tracedoctor_upload_*/<file id>/
_UPLOADED_PATH = re.compile(r"\S*tracedoctor_upload_[^/\s]+/[A-Za-z0-9_-]+/")


def shown_source(source: str) -> str:
    """A run's source with the server's upload directories left out: `upload:rank0.json`."""
    return _UPLOADED_PATH.sub("upload:", source or "")


_tickets: dict[str, UploadTicket] = {}
_tickets_lock = threading.Lock()


def _declared_elsewhere(ticket: UploadTicket) -> tuple[int, int]:
    """The bytes declared by the other open uploads of ticket's owner, and by every other upload."""
    with _tickets_lock:
        others = [t for t in _tickets.values() if t is not ticket]
    sizes = [(t.owner, sum(f.size for f in list(t.files.values()))) for t in others]
    mine = sum(size for owner, size in sizes if ticket.owner is not None and owner == ticket.owner)
    return mine, sum(size for _, size in sizes)


def open_ticket(token_sha256: str | None = None, owner: str | None = None) -> UploadTicket:
    """A new upload, after dropping those idle past TICKET_IDLE_S; token_sha256: the hash of the
    token the session signed in with (token mode), which must stay listed with a role that may
    upload; owner: the user (one user's open uploads share the per-load cap; all uploads share
    TRACEDOCTOR_MAX_UPLOAD_TOTAL_MB). Its directory is made by ingest's temp-dir helper: locked while this server lives,
    so ingest's sweep of stale upload directories leaves it alone, and removes it after a crash.
    Raises OSError."""
    now = time.monotonic()
    with _tickets_lock:
        stale = [t for t in _tickets.values() if now - t.last_used > TICKET_IDLE_S]
    for ticket in stale:
        close_ticket(ticket.ticket_id)
    ticket = UploadTicket(secrets.token_urlsafe(32), token_sha256, Path(make_upload_dir()), owner)
    with _tickets_lock:
        _tickets[ticket.ticket_id] = ticket
    return ticket


def get_ticket(ticket_id: str | None) -> UploadTicket | None:
    """The live upload ticket_id names; one whose token has been revoked (or may no longer
    upload) is closed, its files deleted, and None returned."""
    if not ticket_id:
        return None
    with _tickets_lock:
        ticket = _tickets.get(ticket_id)
    if ticket is not None and ticket.token_sha256 is not None:
        from app import auth

        if not auth.token_hash_may(ticket.token_sha256, "upload"):
            close_ticket(ticket.ticket_id)
            return None
    return ticket


def close_ticket(ticket_id: str | None) -> None:
    """Forget an upload and delete its files."""
    with _tickets_lock:
        ticket = _tickets.pop(ticket_id or "", None)
    if ticket is not None:
        remove_temp_dir(str(ticket.directory))


# --------------------------------------------------------------------------- the HTTP route

async def _receive_slice(request: Any) -> Any:
    """PUT one slice of a file: headers name the ticket, the file (name, size) and the offset the
    slice starts at, which must be what the server already has (409 says how much that is)."""
    from starlette.requests import ClientDisconnect
    from starlette.responses import JSONResponse

    ticket = get_ticket(request.headers.get(TICKET_HEADER))
    if ticket is None:
        return JSONResponse({"error": "this upload has expired or was never opened; reload the page"}, 403)
    ticket.last_used = time.monotonic()
    file_id = request.path_params["file_id"]
    if not _FILE_ID.fullmatch(file_id):
        return JSONResponse({"error": "bad file id"}, 400)
    try:
        offset = int(request.headers["X-Upload-Offset"])
        size = int(request.headers["X-Upload-Size"])
        name = unquote(request.headers["X-Upload-Name"])
        uploaded = ticket.add_file(file_id, name, size)
    except (KeyError, ValueError):
        return JSONResponse({"error": "a slice needs X-Upload-Offset, X-Upload-Size and X-Upload-Name"}, 400)
    except UploadRefused as refused:
        return JSONResponse({"error": str(refused)}, refused.status)
    except OSError as exc:   # the file could not be made: say why in words, never a 500 with a path
        logging.getLogger("tracedoctor").warning("upload %s: %s", file_id, exc)
        return _storage_error(exc)
    if uploaded.lock.locked() or offset != uploaded.received:
        return JSONResponse({"received": uploaded.received, "error": "resume from the bytes received"}, 409)
    async with uploaded.lock:
        try:
            await _append(request, uploaded)
        except UploadRefused as refused:
            return JSONResponse({"error": str(refused)}, refused.status)
        except ClientDisconnect:   # what reached the disk stays; the browser resumes from there
            return JSONResponse({"received": uploaded.received}, 499)
        except OSError as exc:     # a full disk: what is on disk stays, and a retry resumes after it
            logging.getLogger("tracedoctor").warning("upload %s: %s", uploaded.file_id, exc)
            return _storage_error(exc, uploaded.received)
    return JSONResponse({"received": uploaded.received, "complete": uploaded.complete})


def _storage_error(exc: OSError, received: int | None = None) -> Any:
    """The answer to a file the server could not store: 507 for a full disk or quota, 400 for a
    name the file system refuses, 500 otherwise; the reason in words, no server path."""
    from starlette.responses import JSONResponse

    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    status = 507 if full else 400 if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ) else 500
    body: dict[str, Any] = {"error": f"the server could not store the file ({exc.strerror or type(exc).__name__})"}
    if received is not None:
        body["received"] = received
    return JSONResponse(body, status)


def _write_all(fd: int, data: bytes) -> int:
    """Write data to fd unbuffered, following short writes; on an error the bytes written so far
    are on disk and the error is raised."""
    view, written = memoryview(data), 0
    while written < len(view):
        count = os.write(fd, view[written:])
        if count <= 0:   # a regular file that takes nothing is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written += count
    return written


async def _append(request: Any, uploaded: UploadedFile) -> None:
    """Append the request body to the file in WRITE_BYTES pieces, each written off the event loop
    with unbuffered writes. `received` is the file's size on disk (fstat) after every write and
    after a failed one, never what was merely handed to a buffer: an interrupted slice, a full
    disk included, resumes exactly after the bytes that are really there."""
    from anyio import to_thread

    fd = os.open(uploaded.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
    try:
        buffer = bytearray()

        async def flush() -> None:
            data = bytes(buffer)
            buffer.clear()
            try:
                await to_thread.run_sync(_write_all, fd, data)
            finally:
                uploaded.received = os.fstat(fd).st_size

        try:
            async for chunk in request.stream():
                if uploaded.received + len(buffer) + len(chunk) > uploaded.size:
                    buffer.clear()
                    raise UploadRefused(413, "more bytes than the file's declared size")
                buffer += chunk
                if len(buffer) >= WRITE_BYTES:
                    await flush()
        finally:
            if buffer:
                await flush()
    finally:
        os.close(fd)


async def _report_received(request: Any) -> Any:
    """GET: how many bytes of a file the server has (where a resumed upload starts)."""
    from starlette.responses import JSONResponse

    ticket = get_ticket(request.headers.get(TICKET_HEADER))
    if ticket is None:
        return JSONResponse({"error": "this upload has expired or was never opened; reload the page"}, 403)
    uploaded = ticket.files.get(request.path_params["file_id"])
    return JSONResponse({"received": uploaded.received if uploaded else 0})


def route_path() -> str:
    """The route's path, under server.baseUrlPath when the dashboard is served below a prefix."""
    from streamlit import config

    base = (config.get_option("server.baseUrlPath") or "").strip("/")
    return (f"/{base}" if base else "") + ROUTE


def routes() -> list[Any]:
    """The upload route for streamlit.starlette.App."""
    from starlette.routing import Route

    return [Route(route_path(), _receive_slice, methods=["PUT"]),
            Route(route_path(), _report_received, methods=["GET"])]


# --------------------------------------------------------------------------- the browser side

_HTML = """
<div class="td-drop" tabindex="0" role="button" aria-label="Drop rank files here or browse">
  <div class="td-text"><strong>Drag and drop rank files here</strong><br><small class="td-limits"></small></div>
  <button type="button" class="td-browse">Browse files</button>
  <input type="file" multiple hidden>
</div>
<ul class="td-files"></ul>
"""

_CSS = """
.td-drop { display: flex; align-items: center; gap: 1rem; padding: 1rem 1.25rem; border-radius: 0.5rem;
  background: var(--st-secondary-background-color); color: var(--st-text-color); font-family: var(--st-font); }
.td-drop.td-over { outline: 2px dashed var(--st-primary-color); }
.td-text { flex: 1; line-height: 1.5; }
.td-text small { opacity: 0.7; }
.td-browse { border: 1px solid rgba(49, 51, 63, 0.2); background: var(--st-background-color); color: inherit;
  border-radius: 0.5rem; padding: 0.35rem 0.8rem; font: inherit; cursor: pointer; }
.td-browse:hover { border-color: var(--st-primary-color); color: var(--st-primary-color); }
.td-files { list-style: none; margin: 0.5rem 0 0; padding: 0; font-family: var(--st-font); color: var(--st-text-color); }
.td-files li { display: grid; grid-template-columns: minmax(0, 1fr) 8rem 12rem; gap: 0.75rem; align-items: center;
  padding: 0.25rem 0; font-size: 0.9rem; }
.td-files .td-name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.td-files progress { width: 100%; accent-color: var(--st-primary-color); }
.td-files .td-failed { color: var(--st-red-color, #c62828); }
"""

_JS = r"""
// Upload state lives on window, keyed by ticket: a rerun remounts this component while uploads go on.
const uploads = (window.__tracedoctorUploads ??= {});

function fileId() {   // crypto.randomUUID needs a secure context; a team server may be plain http
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function megabytes(n) { return (n / 1048576).toFixed(n < 10485760 ? 1 : 0) + " MB"; }

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  for (const ticket of Object.keys(uploads)) {   // a finished load's list goes with its ticket
    if (ticket !== data.ticket && !uploads[ticket].running) delete uploads[ticket];
  }
  const state = (uploads[data.ticket] ??= { files: [], running: false });
  const drop = parentElement.querySelector(".td-drop");
  const input = parentElement.querySelector("input[type=file]");
  const list = parentElement.querySelector(".td-files");
  parentElement.querySelector(".td-limits").textContent =
    `.json, .json.gz, .zip or .tar.gz · up to ${megabytes(data.maxBytes)} per load · ` +
    "streamed to the server's disk, resumed if the connection drops";

  function render() {
    list.replaceChildren(...state.files.map((item) => {
      const row = document.createElement("li");
      const name = document.createElement("span");
      name.className = "td-name";
      name.textContent = item.name;   // text, never HTML: a file name is the user's input
      name.title = item.name;
      const bar = document.createElement("progress");
      bar.max = Math.max(item.size, 1);
      bar.value = item.status === "done" ? bar.max : item.sent;
      const status = document.createElement("span");
      status.textContent = item.status === "done" ? `uploaded · ${megabytes(item.size)}`
        : item.status === "failed" ? item.error
        : `${megabytes(item.sent)} of ${megabytes(item.size)}`;
      if (item.status === "failed") status.className = "td-failed";
      row.append(name, bar, status);
      return row;
    }));
  }
  state.render = render;

  async function send(item, start) {
    const end = Math.min(start + data.sliceBytes, item.size);
    const response = await fetch(`${data.endpoint}/${item.id}`, {
      method: "PUT", body: item.file.slice(start, end),
      headers: { [data.ticketHeader]: data.ticket, "X-Upload-Offset": String(start),
                 "X-Upload-Size": String(item.size), "X-Upload-Name": encodeURIComponent(item.name),
                 "Content-Type": "application/octet-stream" },
    });
    const body = await response.json().catch(() => ({}));
    return { status: response.status, body };
  }

  async function upload(item) {
    let failures = 0;
    while (item.status === "queued") {
      try {
        const { status, body } = await send(item, item.sent);
        if (status === 200) {
          item.sent = body.received;
          if (body.complete) item.status = "done";
          failures = 0;
        } else if (status === 409) {
          item.sent = body.received;   // the server has a different amount: resume from it
        } else if (status >= 400 && status < 500 && status !== 408 && status !== 499) {
          item.status = "failed"; item.error = body.error || `refused (${status})`;
        } else {
          throw new Error(body.error || `server error ${status}`);
        }
      } catch (error) {   // a dropped connection or a server restart: wait, ask what arrived, go on
        if (++failures > 6) { item.status = "failed"; item.error = `not uploaded: ${error.message}`; break; }
        await new Promise((resolve) => setTimeout(resolve, 500 * 2 ** failures));
        const probe = await fetch(`${data.endpoint}/${item.id}`, { headers: { [data.ticketHeader]: data.ticket } })
          .then((r) => r.json()).catch(() => null);
        if (probe && Number.isInteger(probe.received)) item.sent = probe.received;
      }
      state.render?.();
    }
  }

  async function run() {
    if (state.running) return;
    state.running = true;
    try {
      for (let item; (item = state.files.find((f) => f.status === "queued")); ) await upload(item);
    } finally {
      state.running = false;
    }
    state.render?.();
    setTriggerValue("uploaded", state.files.filter((f) => f.status === "done").length);
  }

  function add(fileList) {
    for (const file of fileList) {
      state.files.push({ id: fileId(), file, name: file.name, size: file.size, sent: 0, status: "queued" });
    }
    render();
    run();
  }

  drop.onclick = () => input.click();
  drop.onkeydown = (event) => {   // the zone itself; a focused button gets a click of its own
    if (event.target === drop && (event.key === "Enter" || event.key === " ")) input.click();
  };
  input.onchange = () => { add(input.files); input.value = ""; };
  drop.ondragover = (event) => { event.preventDefault(); drop.classList.add("td-over"); };
  drop.ondragleave = () => drop.classList.remove("td-over");
  drop.ondrop = (event) => { event.preventDefault(); drop.classList.remove("td-over"); add(event.dataTransfer.files); };
  render();
  return () => { if (state.render === render) state.render = null; };
}
"""


@functools.cache
def _component() -> Any:
    import streamlit as st

    return st.components.v2.component("tracedoctor_streaming_uploader", html=_HTML, css=_CSS, js=_JS)


def uploader(ticket: UploadTicket, key: str) -> Any:
    """Draw the drop zone for this upload; a rerun follows each batch of finished files."""
    data = {"ticket": ticket.ticket_id, "endpoint": route_path().rsplit("/", 1)[0], "ticketHeader": TICKET_HEADER,
            "sliceBytes": SLICE_BYTES, "maxBytes": max_upload_bytes()}
    return _component()(data=data, key=key, on_uploaded_change=lambda: None)
