"""`engram pull DIR` and `engram push DIR`: a space as a directory of Markdown files.

`pull` writes every document of a space under DIR and records, in DIR/.engram-state.json,
the sha256 and version of each as it was pulled (its etag). `push` writes back the files
that changed since, each conditional on that etag (`expected_sha256`), so an edit made in
the space meanwhile is reported as a conflict and never overwritten; it creates new files
(create-only), and reports the files deleted locally (deleting them from the space with
`--delete`, again only if unchanged there). A file that cannot be stored (not Markdown, a
symbolic link, not UTF-8, too large, over quota, refused) is reported on its own and never
stops the others. Both exit 0 when everything went in, 1 when something did not.
"""

import hashlib
import json
import os
import stat
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from engram.cli.client import (
    AddrOption,
    BotOption,
    NameOption,
    ProjectOption,
    SpaceFlags,
    TenantOption,
    TokenOption,
    UserOption,
    VisibilityOption,
    call,
    console,
    engram_client,
    err_console,
    explain_error,
    fail,
)

if TYPE_CHECKING:
    from engram.client import Client, Document, DocumentWrite

# Start-up cost: like every command module this one imports nothing heavy at import time
# (grpc, the generated messages, rich, tenacity are imported where they are used).

R = TypeVar("R")

STATE_FILE = ".engram-state.json"
STATE_FORMAT = 1
# Version-control directories: never pushed, never reported.
IGNORED_DIRS = frozenset({".git", ".hg", ".svn"})
MARKDOWN_SUFFIX = ".md"
# A local file above this is not even read (servers store at most a few MiB per document).
MAX_LOCAL_FILE_BYTES = 64 * 1024 * 1024
LIST_PAGE = 1000
# Calls in flight at once (reads of pull, writes of push), and how far ahead they run.
PARALLEL_CALLS = 8
PARALLEL_BATCH = 64
CONTENTION_ATTEMPTS = 4
# The reason of an ABORTED conditional write or delete (engram.domain.errors.EtagMismatch).
ETAG_MISMATCH = "ETAG_MISMATCH"
WRITE_CONTENTION = "WRITE_CONTENTION"
# The server cannot be reached: stop (every further call would fail the same way).
FATAL_CODES = frozenset({"UNAVAILABLE", "UNAUTHENTICATED", "DEADLINE_EXCEEDED"})

# Actions that leave something not in place: any of them makes the exit code 1.
FAILED_ACTIONS = frozenset({"conflict", "refused", "unsupported", "skipped"})

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (fields: see the README).")
]
# Space options that, given, name the space (else the directory's own is used).
SPACE_PARAMS = ("visibility", "name", "project", "bot", "user", "tenant")
NAMED_SOURCES = frozenset({"COMMANDLINE", "ENVIRONMENT"})


# --- the state file --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tracked:
    """A document as it was last pulled or pushed: its etag."""

    sha256: str
    version: int


@dataclass(slots=True)
class SyncState:
    space: SpaceFlags
    documents: dict[str, Tracked] = field(default_factory=dict)


def load_state(directory: Path) -> SyncState | None:
    """The directory's state file, or None when it has none."""
    path = directory / STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        fail(f"cannot read {path}: {error}; move it away to start over")
    try:
        if raw["format"] != STATE_FORMAT:
            fail(f"{path} has format {raw['format']}; this engram reads format {STATE_FORMAT}")
        space = SpaceFlags(**{key: str(value) for key, value in raw["space"].items()})
        documents = {
            str(doc_path): Tracked(str(entry["sha256"]), int(entry["version"]))
            for doc_path, entry in raw["documents"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        fail(f"{path} is not an engram state file ({error!r}); move it away to start over")
    return SyncState(space, documents)


def save_state(directory: Path, state: SyncState) -> None:
    """Writes the state file atomically (a crash leaves the old one or the new one)."""
    body = {
        "format": STATE_FORMAT,
        "space": asdict(state.space),
        "documents": {
            doc_path: {"sha256": tracked.sha256, "version": tracked.version}
            for doc_path, tracked in sorted(state.documents.items())
        },
    }
    _write_atomically(directory / STATE_FILE, json.dumps(body, indent=1).encode("utf-8") + b"\n")


def _write_atomically(target: Path, data: bytes) -> None:
    temporary = target.with_name(f".{target.name}.engram-tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


# --- what happened to each file ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileResult:
    path: str
    action: str
    detail: str = ""
    sha256: str = ""
    version: int = 0


@dataclass(slots=True)
class Report:
    command: str
    directory: Path
    space: SpaceFlags
    files: list[FileResult] = field(default_factory=list)

    def add(self, result: FileResult) -> None:
        self.files.append(result)

    @property
    def ok(self) -> bool:
        return not any(result.action in FAILED_ACTIONS for result in self.files)

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(result.action for result in self.files).items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "dir": str(self.directory),
            "space": asdict(self.space),
            "ok": self.ok,
            "counts": self.counts(),
            "files": [asdict(result) for result in sorted(self.files, key=lambda r: r.path)],
        }


QUIET_ACTIONS = frozenset({"unchanged"})


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False, separators=(",", ":")))
    else:
        for result in sorted(report.files, key=lambda r: r.path):
            if result.action in QUIET_ACTIONS:
                continue
            suffix = f": {result.detail}" if result.detail else ""
            version = f" v{result.version}" if result.version and not result.detail else ""
            line = f"{result.action:<14} {result.path}{version}{suffix}"
            if result.action in FAILED_ACTIONS or result.action in ("pending_delete", "kept"):
                # Text, not markup: details carry "[REASON]" and paths may hold brackets.
                err_console.print(_warning(line), highlight=False)
            else:
                console.print(line, highlight=False, markup=False)
        summary = ", ".join(f"{count} {action}" for action, count in report.counts().items())
        console.print(
            f"{report.command} {space_label(report.space)} <-> {report.directory}: "
            f"{summary or 'nothing to do'}",
            highlight=False,
            markup=False,
        )
        if not report.ok:
            err_console.print(
                "[bold yellow]not everything went in[/]: see the lines above", highlight=False
            )
    if not report.ok:
        raise typer.Exit(1)


def _warning(line: str) -> Any:
    from rich.text import Text

    return Text(line, style="yellow")


def space_label(space: SpaceFlags) -> str:
    qualifiers = [
        f"{key}={value}"
        for key, value in (
            ("tenant", space.tenant),
            ("project", space.project),
            ("bot", space.bot),
            ("user", space.user),
        )
        if value
    ]
    return f"{space.visibility}:{space.name}" + (
        f" ({', '.join(qualifiers)})" if qualifiers else ""
    )


# --- decisions (pure) --------------------------------------------------------------------------


def pull_action(local: str | None, prior: Tracked | None, remote: str, *, force: bool) -> str:
    """What pull does with a document the space holds (sha256 `remote`), given the local
    file's sha256 (None: absent) and its etag from the last pull or push."""
    if local == remote:
        return "unchanged"
    if force:
        return "created" if local is None else "updated"
    if local is None:
        if prior is None:
            return "created"
        # Deleted here since: keep the deletion (push --delete carries it over), unless the
        # space changed it meanwhile.
        return "kept" if prior.sha256 == remote else "conflict"
    if prior is not None and local == prior.sha256:
        return "updated"  # untouched here, changed in the space
    return "conflict"  # edited here (or an untracked file in the way)


def pull_gone_action(local: str | None, prior: Tracked, *, force: bool) -> str:
    """What pull does with a tracked document the space no longer holds."""
    if local is None or local == prior.sha256 or force:
        return "removed"
    return "conflict"


def push_needed(local: str, prior: Tracked | None) -> bool:
    """A local file is written unless it is unchanged since its last pull or push."""
    return prior is None or prior.sha256 != local


# --- the local directory -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalFiles:
    # Document path -> file, for every regular Markdown file.
    markdown: dict[str, Path]
    # Whatever else was found, each reported as unsupported.
    unsupported: list[FileResult]


def document_path(directory: Path, file: Path) -> str:
    """The document path a local file maps to: `/`-separated, NFC (macOS writes NFD)."""
    relative = file.relative_to(directory).as_posix()
    return unicodedata.normalize("NFC", relative)


def scan(directory: Path) -> LocalFiles:
    """Every file under `directory`, never following a symbolic link."""
    markdown: dict[str, Path] = {}
    unsupported: list[FileResult] = []
    for root, dirs, files in os.walk(directory, followlinks=False):
        base = Path(root)
        kept_dirs = []
        for name in sorted(dirs):
            entry = base / name
            if name in IGNORED_DIRS:
                continue
            if entry.is_symlink():
                unsupported.append(
                    FileResult(
                        document_path(directory, entry),
                        "unsupported",
                        "a symbolic link to a directory: not followed",
                    )
                )
                continue
            kept_dirs.append(name)
        dirs[:] = kept_dirs
        for name in sorted(files):
            entry = base / name
            if base == directory and name == STATE_FILE:
                continue
            path = document_path(directory, entry)
            problem = _unsupported_file(entry, name)
            if problem:
                unsupported.append(FileResult(path, "unsupported", problem))
            else:
                markdown[path] = entry
    return LocalFiles(markdown, unsupported)


def _unsupported_file(entry: Path, name: str) -> str:
    try:
        mode = entry.lstat().st_mode
    except OSError as error:  # removed while the directory was read, or unreadable
        return f"cannot read it: {error.strerror or error}"
    if stat.S_ISLNK(mode):
        return "a symbolic link: not followed"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if not name.endswith(MARKDOWN_SUFFIX) or name == MARKDOWN_SUFFIX:
        return f"not a Markdown file (engram stores {MARKDOWN_SUFFIX})"
    return ""


def file_sha256(file: Path) -> str | None:
    """The sha256 of a regular file's bytes, read in pieces; None when there is no regular
    file there. Raises OSError when it cannot be read."""
    try:
        if not stat.S_ISREG(file.lstat().st_mode):
            return None
        with file.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def read_markdown(file: Path) -> tuple[str, str] | str:
    """(content, sha256) of a local file, or why it cannot be pushed."""
    try:
        size = file.lstat().st_size
        if size > MAX_LOCAL_FILE_BYTES:
            return f"{size} bytes: too large to store as one document; split it"
        data = file.read_bytes()
    except OSError as error:
        return f"cannot read it: {error.strerror or error}"
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not UTF-8 text (bad byte at offset {error.start})"
    return content, hashlib.sha256(data).hexdigest()


def blocked_by(directory: Path, doc_path: str) -> str:
    """Why pull must not write `doc_path` under `directory` (a symbolic link or a file in
    the way would send the write elsewhere); empty when it may."""
    current = directory
    parts = doc_path.split("/")
    for part in parts[:-1]:
        current = current / part
        if current.is_symlink():
            return f"{current.relative_to(directory).as_posix()} is a symbolic link here"
        if current.exists() and not current.is_dir():
            return f"{current.relative_to(directory).as_posix()} is a file here"
    target = current / parts[-1]
    if target.is_symlink():
        return "it is a symbolic link here"
    if target.exists() and not target.is_file():
        return "something other than a file is in its place here"
    return ""


def _remove_empty_parents(directory: Path, file: Path) -> None:
    parent = file.parent
    while parent != directory and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


# --- the space ---------------------------------------------------------------------------------


def space_given(ctx: typer.Context) -> bool:
    """True when a space option was set on this command line, in the environment, or as a
    global option before the command (`engram -v bot ... push DIR`), rather than left to
    its default."""
    for param in SPACE_PARAMS:
        source = _source(ctx, param)
        if source in NAMED_SOURCES:
            return True
        if source == "DEFAULT_MAP" and ctx.parent is not None:
            # Handed down by the global options: given if they were.
            if _source(ctx.parent, param) in NAMED_SOURCES:
                return True
    return False


def _source(ctx: Any, param: str) -> str:
    """Where click took a parameter's value from (its ParameterSource's name; "" if unset)."""
    source = ctx.get_parameter_source(param)
    return source.name if source is not None else ""


def resolve_space(state: SpaceFlags | None, flags: SpaceFlags, *, given: bool) -> SpaceFlags:
    """The space the options name when given, else the one the directory was pulled from,
    else the options' defaults. Options naming another space than the directory's are
    refused."""
    if not given:
        return state or flags
    if state is not None and state != flags:
        fail(
            f"this directory holds space {space_label(state)}, not {space_label(flags)}; "
            "leave the space options out, or use another directory"
        )
    return flags


class CallFailed(Exception):
    """A StorageService call that failed: its status code's name, engram reason and the
    printable `CODE: message [REASON]`."""

    def __init__(self, code: str, reason: str, explanation: str) -> None:
        super().__init__(explanation)
        self.code = code
        self.reason = reason
        self.explanation = explanation


class Remote:
    """The StorageService calls pull and push make, through one blocking engram.client; a
    failed call raises CallFailed, so the callers need nothing of grpc."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def list_paths(self) -> Iterator[str]:
        """Every document path of the space (a failure ends the command)."""
        entries = self._client.iter_documents(recursive=True, page_size=LIST_PAGE)
        for entry in call(lambda: list(entries)):
            if not entry.is_dir:
                yield entry.path

    def read(self, path: str) -> "Document":
        return self._call(lambda: self._client.read_document(path))

    def try_read(self, path: str) -> "Document | CallFailed":
        """The document, or why not (for a worker thread: nothing raised)."""
        try:
            return self.read(path)
        except CallFailed as failure:
            return failure

    def write(
        self, path: str, content: str, *, expected_sha256: str = "", create_only: bool = False
    ) -> "DocumentWrite":
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_attempt,
            wait_random_exponential,
        )

        # Parallel writes to one space may lose a race on the server (WRITE_CONTENTION, not
        # an etag conflict): retried a few times, with jitter.
        for attempt in Retrying(
            retry=retry_if_exception(_contention),
            stop=stop_after_attempt(CONTENTION_ATTEMPTS),
            wait=wait_random_exponential(multiplier=0.01, max=0.2),
            reraise=True,
        ):
            with attempt:
                written: DocumentWrite = self._call(
                    lambda: self._client.write_document(
                        path, content, expected_sha256=expected_sha256, create_only=create_only
                    )
                )
        return written

    def delete(self, path: str, expected_sha256: str) -> None:
        self._call(lambda: self._client.delete_document(path, expected_sha256=expected_sha256))

    def _call(self, function: Callable[[], R]) -> R:
        from engram.domain.errors import EngramError
        from engram.runtime.errors import status_code_for

        try:
            return function()
        except EngramError as error:
            raise CallFailed(
                status_code_for(error).name, error.info_reason, explain_error(error)
            ) from None


def _contention(error: BaseException) -> bool:
    return isinstance(error, CallFailed) and error.reason == WRITE_CONTENTION


def in_parallel(function: Callable[[str], R], paths: list[str]) -> Iterator[tuple[str, R]]:
    """(path, function(path)) in order, PARALLEL_CALLS calls at a time, a bounded batch
    ahead (a batch of documents is all that is held)."""
    with ThreadPoolExecutor(PARALLEL_CALLS) as pool:
        for start in range(0, len(paths), PARALLEL_BATCH):
            batch = paths[start : start + PARALLEL_BATCH]
            yield from zip(batch, pool.map(function, batch), strict=True)


def stop_if_fatal(failure: CallFailed) -> None:
    """Ends the command when the server cannot be reached or refuses the caller outright."""
    if failure.code in FATAL_CODES:
        fail(failure.explanation, code=1)


# --- pull --------------------------------------------------------------------------------------


def pull_into(
    remote: Remote, directory: Path, state: SyncState, report: Report, *, force: bool
) -> None:
    remote_paths = set(remote.list_paths())
    wanted = []
    for doc_path in sorted(remote_paths):
        blocked = blocked_by(directory, doc_path)
        if blocked:
            report.add(FileResult(doc_path, "skipped", f"not written: {blocked}"))
        else:
            wanted.append(doc_path)
    for doc_path, read in in_parallel(remote.try_read, wanted):
        if isinstance(read, CallFailed):
            stop_if_fatal(read)
            if read.code == "NOT_FOUND":
                remote_paths.discard(doc_path)  # deleted since it was listed
            else:
                report.add(FileResult(doc_path, "refused", read.explanation))
            continue
        try:
            report.add(_pull_one(directory, state, doc_path, read, force=force))
        except OSError as error:
            report.add(FileResult(doc_path, "skipped", f"local file: {_os_error(error)}"))
    for doc_path in sorted(set(state.documents) - remote_paths):
        try:
            report.add(_pull_gone(directory, state, doc_path, force=force))
        except OSError as error:
            report.add(FileResult(doc_path, "skipped", f"local file: {_os_error(error)}"))


def _pull_one(
    directory: Path,
    state: SyncState,
    doc_path: str,
    document: "Document",
    *,
    force: bool,
) -> FileResult:
    """Brings one document of the space here (raises OSError if the local side fails)."""
    target = directory / doc_path
    prior = state.documents.get(doc_path)
    action = pull_action(file_sha256(target), prior, document.sha256, force=force)
    detail = ""
    if action in ("created", "updated"):
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(target, document.content.encode("utf-8"))
    if action == "conflict":
        detail = _pull_conflict(target.exists(), prior)
    elif action == "kept":
        detail = "deleted here: not restored (push --delete deletes it, pull --force restores it)"
    else:
        state.documents[doc_path] = Tracked(document.sha256, document.version)
    return FileResult(doc_path, action, detail, document.sha256, document.version)


def _pull_gone(directory: Path, state: SyncState, doc_path: str, *, force: bool) -> FileResult:
    """A tracked document the space no longer holds."""
    target = directory / doc_path
    local = file_sha256(target)
    if pull_gone_action(local, state.documents[doc_path], force=force) != "removed":
        return FileResult(
            doc_path,
            "conflict",
            "deleted in the space, edited here: local file kept "
            "(push --force recreates it, pull --force removes it)",
        )
    if local is not None:
        target.unlink()
        _remove_empty_parents(directory, target)
    del state.documents[doc_path]
    return FileResult(doc_path, "removed", "deleted in the space")


def _os_error(error: OSError) -> str:
    return f"{error.strerror or error} ({error.filename})" if error.filename else str(error)


def _pull_conflict(local_exists: bool, prior: Tracked | None) -> str:
    if not local_exists:
        return (
            "deleted here and changed in the space since the last pull: not restored "
            "(pull --force restores it)"
        )
    if prior is None:
        return "a different local file is in its place: kept (pull --force replaces it)"
    return (
        "edited here and changed in the space since the last pull: local file kept "
        "(pull --force takes the space's, push --force overwrites it)"
    )


# --- push --------------------------------------------------------------------------------------


def push_from(
    remote: Remote,
    directory: Path,
    state: SyncState,
    report: Report,
    *,
    delete: bool,
    force: bool,
    dry_run: bool,
) -> None:
    local = scan(directory)
    for result in local.unsupported:
        report.add(result)
    gone = sorted(
        doc_path
        for doc_path in state.documents
        if doc_path not in local.markdown and not os.path.lexists(directory / doc_path)
    )
    # Deletions first: what they free may be what a write below needs under the quota.
    for doc_path in gone:
        if not delete:
            report.add(
                FileResult(doc_path, "pending_delete", "deleted here; push --delete deletes it")
            )
            continue
        if dry_run:
            report.add(FileResult(doc_path, "deleted", "dry run"))
            continue
        report.add(_push_delete(remote, state, doc_path, state.documents[doc_path], force=force))

    def push_one(doc_path: str) -> FileResult:
        read = read_markdown(local.markdown[doc_path])
        if isinstance(read, str):
            return FileResult(doc_path, "unsupported", read)
        content, sha256 = read
        prior = state.documents.get(doc_path)
        if not push_needed(sha256, prior):
            assert prior is not None
            return FileResult(doc_path, "unchanged", "", prior.sha256, prior.version)
        if dry_run:
            return FileResult(doc_path, "created" if prior is None else "updated", "dry run")
        return _push_write(remote, state, doc_path, content, sha256, prior, force=force)

    # Changed files before new ones, each in path order. Workers only touch their own path's
    # entry of state.documents.
    ordered = sorted(local.markdown, key=lambda p: (p not in state.documents, p))
    for _, result in in_parallel(push_one, ordered):
        report.add(result)


def _push_write(
    remote: Remote,
    state: SyncState,
    doc_path: str,
    content: str,
    sha256: str,
    prior: Tracked | None,
    *,
    force: bool,
) -> FileResult:
    try:
        if force:
            response = remote.write(doc_path, content)
        elif prior is None:
            response = remote.write(doc_path, content, create_only=True)
        else:
            response = remote.write(doc_path, content, expected_sha256=prior.sha256)
    except CallFailed as failure:
        stop_if_fatal(failure)
        if failure.reason != ETAG_MISMATCH:
            return FileResult(doc_path, "refused", failure.explanation)
        return _after_conflict(remote, state, doc_path, sha256, prior)
    document = response.document
    state.documents[doc_path] = Tracked(document.sha256, document.version)
    action = "created" if response.created else "updated"
    return FileResult(doc_path, action, "", document.sha256, document.version)


def _after_conflict(
    remote: Remote, state: SyncState, doc_path: str, sha256: str, prior: Tracked | None
) -> FileResult:
    """A conditional write lost: fine if the space already holds this very content (a
    push cut off before it saved its state, or the same edit made twice), else a conflict."""
    try:
        current = remote.read(doc_path)
    except CallFailed as failure:
        stop_if_fatal(failure)
        if failure.code == "NOT_FOUND":
            return FileResult(
                doc_path,
                "conflict",
                "deleted in the space since the last pull: not recreated "
                "(push --force recreates it, pull --force removes it here)",
            )
        return FileResult(doc_path, "refused", failure.explanation)
    if current.sha256 == sha256:
        state.documents[doc_path] = Tracked(current.sha256, current.version)
        return FileResult(doc_path, "unchanged", "", current.sha256, current.version)
    what = "changed in the space since the last pull" if prior else "exists in the space"
    return FileResult(
        doc_path,
        "conflict",
        f"{what} (v{current.version}, sha256 {current.sha256[:12]}): not overwritten "
        "(pull to see it, or push --force to overwrite)",
        current.sha256,
        current.version,
    )


def _push_delete(
    remote: Remote, state: SyncState, doc_path: str, prior: Tracked, *, force: bool
) -> FileResult:
    try:
        remote.delete(doc_path, "" if force else prior.sha256)
    except CallFailed as failure:
        stop_if_fatal(failure)
        if failure.code == "NOT_FOUND":
            del state.documents[doc_path]
            return FileResult(doc_path, "deleted", "already gone from the space")
        if failure.reason == ETAG_MISMATCH:
            return FileResult(
                doc_path,
                "conflict",
                "changed in the space since the last pull: not deleted "
                "(pull to see it, or push --delete --force)",
            )
        return FileResult(doc_path, "refused", failure.explanation)
    del state.documents[doc_path]
    return FileResult(doc_path, "deleted")


# --- the commands ------------------------------------------------------------------------------


def synced_state(ctx: typer.Context, directory: Path, flags: SpaceFlags) -> SyncState:
    """DIR's sync state: its state file's, or a new one for the space the options name
    (options naming another space than the state file's are refused)."""
    previous = load_state(directory)
    space = resolve_space(previous.space if previous else None, flags, given=space_given(ctx))
    return previous or SyncState(space)


def register(app: typer.Typer) -> None:
    @app.command()
    def pull(
        ctx: typer.Context,
        directory: Annotated[
            Path, typer.Argument(metavar="DIR", help="Directory to write the space into.")
        ],
        force: Annotated[
            bool,
            typer.Option("--force", help="Replace local edits and files in the way."),
        ] = False,
        as_json: JsonOption = False,
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Write a space's documents into DIR as files; a local edit is never overwritten.

        Etags go to DIR/.engram-state.json with the space: later pulls and pushes of DIR
        need no space options. Exit 1 when something was not written (conflict, skipped).
        """
        if directory.exists() and not directory.is_dir():
            fail(f"{directory} is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
        directory = directory.resolve()
        state = synced_state(
            ctx, directory, SpaceFlags(visibility, name, project, bot, user, tenant)
        )
        space = state.space
        report = Report("pull", directory, space)
        with engram_client(addr, token, space.to_space()) as client:
            remote = Remote(client)
            try:
                pull_into(remote, directory, state, report, force=force)
            finally:
                save_state(directory, state)
        print_report(report, as_json)

    @app.command()
    def push(
        ctx: typer.Context,
        directory: Annotated[
            Path, typer.Argument(metavar="DIR", help="Directory to write back from.")
        ],
        delete: Annotated[
            bool,
            typer.Option("--delete", help="Delete from the space what was deleted here."),
        ] = False,
        force: Annotated[
            bool,
            typer.Option("--force", help="Overwrite (or delete) despite changes in the space."),
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Report what would be written; write nothing.")
        ] = False,
        as_json: JsonOption = False,
        visibility: VisibilityOption = "private",
        name: NameOption = "default",
        project: ProjectOption = "",
        bot: BotOption = "",
        user: UserOption = "",
        tenant: TenantOption = "",
        addr: AddrOption = "127.0.0.1:50051",
        token: TokenOption = "",
    ) -> None:
        """Write DIR's changed and new files back to the space, each only if the space
        has not changed it since the last pull; report what was deleted here.

        The space is the one DIR was pulled from (space options naming another are
        refused). Exit 1 when some file did not go in (conflict, refused, unsupported).
        """
        if not directory.is_dir():
            fail(f"no such directory: {directory}")
        directory = directory.resolve()
        state = synced_state(
            ctx, directory, SpaceFlags(visibility, name, project, bot, user, tenant)
        )
        space = state.space
        report = Report("push", directory, space)
        with engram_client(addr, token, space.to_space()) as client:
            remote = Remote(client)
            try:
                push_from(
                    remote, directory, state, report, delete=delete, force=force, dry_run=dry_run
                )
            finally:
                if not dry_run:
                    save_state(directory, state)
        print_report(report, as_json)
