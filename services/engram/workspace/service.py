"""The workspace use cases (ARCHITECTURE §5): the memory tools of one agent workspace (one
space), over the space's documents and search.

Every call authorizes its caller first (stamping tenant and user), then validates the
request, then - for writes - counts one write against the agent's rate limits (principal +
space, shared by every replica through the store), and only then touches storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from engram.domain import workspace as rules
from engram.domain.errors import DocumentNotFound, EtagMismatch, InvalidArgument, quoted
from engram.domain.heartbeat import HeartbeatFields, render_heartbeat
from engram.domain.paths import validate_directory, validate_document_path
from engram.domain.ports import Authorizer
from engram.domain.positions import IndexPosition
from engram.domain.principals import Action, Principal
from engram.domain.prompt import (
    IDENTITY_PATHS,
    AssembledPrompt,
    PromptFile,
    PromptLayout,
    assemble_prompt,
    soul_baseline,
)
from engram.domain.spaces import SpaceRef
from engram.domain.text_rules import utf8_len
from engram.domain.workspace import Target, TreeNode
from engram.workspace.agent_state import AgentStateStore
from engram.workspace.ports import (
    NO_WAIT,
    MemoryHits,
    PositionWait,
    StoredWrite,
    WorkspaceDocument,
    WorkspaceDocuments,
    WorkspaceSearch,
    WriteGate,
)

# Documents a tree lists at most; a larger subtree is refused with a hint to narrow it.
MAX_TREE_DOCUMENTS = 10_000
# A first write of a log raced by another, or an append to a document another write changed
# between read and write, is tried again this many times in all.
WRITE_ATTEMPTS = 5
# Session journals of today and yesterday a prompt includes at most (in path order), so a
# flood of sessions cannot grow the prompt past any message size.
MAX_PROMPT_JOURNALS = 32


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A memory_write as requested (proto zeros already turned into defaults)."""

    space: SpaceRef
    content: str
    target: Target = Target.DAILY_LOG
    path: str = ""
    append: bool = True
    time_zone: str = ""
    session: str = ""
    # Heartbeat only: fields rendered into HEARTBEAT.md's status block (content: its note).
    heartbeat: HeartbeatFields | None = None


@dataclass(frozen=True, slots=True)
class DateRead:
    """Read-by-date: `date` ("today", "yesterday", YYYY-MM-DD) in `time_zone`, and the
    session's journal when `session` is set."""

    date: str
    time_zone: str = ""
    session: str = ""


@dataclass(frozen=True, slots=True)
class WorkspacePolicy:
    """What the workspace tools may change, and how the prompt reads. `memory_append_only`:
    MEMORY.md is only appended to (seed 004: the operator, through StorageService, and
    dreaming change it otherwise). `prompt_layout`: the prompt's order when a request names
    none."""

    memory_append_only: bool = True
    prompt_layout: PromptLayout = PromptLayout.SEED_000


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    path: str
    append: bool
    # UTF-8 bytes this write added (or wrote, when replacing), prefixes and newlines included.
    content_length: int
    size_bytes: int
    sha256: str
    version: int
    # Where the indexes must be for a search to see this write (read-your-writes).
    position: IndexPosition | None = None


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)


def _outcome(stored: StoredWrite, *, append: bool, added_bytes: int) -> WriteOutcome:
    return WriteOutcome(
        path=stored.path,
        append=append,
        content_length=added_bytes,
        size_bytes=stored.size_bytes,
        sha256=stored.sha256,
        version=stored.version,
        position=stored.position,
    )


def _retrying() -> AsyncRetrying:
    return AsyncRetrying(
        stop=stop_after_attempt(WRITE_ATTEMPTS),
        retry=retry_if_exception_type(EtagMismatch),
        reraise=True,
    )


class WorkspaceService:
    def __init__(
        self,
        documents: WorkspaceDocuments,
        search: WorkspaceSearch,
        authorizer: Authorizer,
        writes: WriteGate,
        agents: AgentStateStore,
        templates: Mapping[str, str],
        *,
        clock: Callable[[], datetime] = utc_now,
        policy: WorkspacePolicy = WorkspacePolicy(),
        min_relevance: float = rules.DEFAULT_MIN_RELEVANCE,
    ) -> None:
        self._documents = documents
        self._min_relevance = rules.min_relevance(min_relevance)
        self._search = search
        self._authorizer = authorizer
        self._writes = writes
        self._agents = agents
        self._templates = dict(templates)
        self._clock = clock
        self._policy = policy

    async def _authorize(self, principal: Principal, action: Action, space: SpaceRef) -> SpaceRef:
        return (await self._authorizer.authorize(principal, action, space)).space

    # --- writes ------------------------------------------------------------------------------

    async def write(self, principal: Principal, request: WriteRequest) -> WriteOutcome:
        return await self._write(principal, request, content_field="content")

    async def _write(
        self, principal: Principal, request: WriteRequest, *, content_field: str
    ) -> WriteOutcome:
        space = await self._authorize(principal, Action.WRITE, request.space)
        heartbeat = request.heartbeat if request.target is Target.HEARTBEAT else None
        if request.heartbeat is not None and heartbeat is None:
            raise InvalidArgument(
                "heartbeat fields go with target MEMORY_TARGET_HEARTBEAT", field="heartbeat"
            )
        content = request.content
        if heartbeat is None:
            rules.require_content(content, field=content_field)
        zone = rules.time_zone(request.time_zone)
        now = rules.local_now(self._clock(), zone)
        path = rules.target_path(
            request.target, request.path, today=now.date(), session=request.session
        )
        if not request.append and path == rules.MEMORY_PATH and self._policy.memory_append_only:
            raise rules.memory_append_only()
        await self._writes.check(principal, space.id)
        if heartbeat is not None:
            return await self._heartbeat(principal, space, path, heartbeat, content)
        header = ""
        if request.target is Target.DAILY_LOG:
            content = rules.daily_log_entry(now, content)
            header = rules.daily_log_header(now.date())
        if request.append:
            return await self._append(principal, space, path, content, header=header)
        text = header + rules.line(content) if header else content
        stored = await self._documents.write(principal, space, path, text, append=False)
        return _outcome(stored, append=False, added_bytes=utf8_len(text))

    async def append_daily_log(
        self,
        principal: Principal,
        space: SpaceRef,
        entry: str,
        *,
        time_zone: str = "",
        session: str = "",
    ) -> WriteOutcome:
        request = WriteRequest(
            space=space,
            content=entry,
            target=Target.DAILY_LOG,
            time_zone=time_zone,
            session=session,
        )
        return await self._write(principal, request, content_field="entry")

    async def _append(
        self, principal: Principal, space: SpaceRef, path: str, addition: str, *, header: str
    ) -> WriteOutcome:
        """Appends `addition` as a line of its own, and creates a missing document with
        `header` first. Storage decides both on the document as it finds it, under its lock,
        so no other write slips between a newline and the entry, and racing appends to a
        new document leave one header: one storage call, no read first."""
        stored = await self._documents.write(
            principal,
            space,
            path,
            rules.line(addition),
            append=True,
            as_line=True,
            created_prefix=header,
        )
        return _outcome(stored, append=True, added_bytes=stored.bytes_delta)

    async def _heartbeat(
        self,
        principal: Principal,
        space: SpaceRef,
        path: str,
        fields: HeartbeatFields,
        note: str,
    ) -> WriteOutcome:
        """Re-renders HEARTBEAT.md's status block, replacing the version it was rendered
        from (create-only when there is none), so an operator's edit is never lost."""
        async for attempt in _retrying():
            with attempt:
                current = await self._documents.get(principal, space, path)
                text = render_heartbeat(current.content if current else None, fields, note)
                stored = await self._documents.write(
                    principal,
                    space,
                    path,
                    text,
                    append=False,
                    expected_sha256=current.sha256 if current else "",
                    create_only=current is None,
                )
        return _outcome(stored, append=False, added_bytes=utf8_len(text))

    async def seed(self, principal: Principal, space: SpaceRef) -> SeedOutcome:
        """Creates each template that does not exist yet (create-only: an existing or edited
        file is never replaced, and seeding twice creates nothing the second time)."""
        space = await self._authorize(principal, Action.WRITE, space)
        await self._writes.check(principal, space.id)
        outcome = SeedOutcome()
        for path, text in self._templates.items():
            try:
                await self._documents.write(
                    principal, space, path, text, append=False, create_only=True
                )
            except EtagMismatch:
                outcome.existing.append(path)
            else:
                outcome.created.append(path)
        return outcome

    async def complete_bootstrap(self, principal: Principal, space: SpaceRef) -> str:
        """Archives BOOTSTRAP.md as BOOTSTRAP.done-<its updated_at>.md: a create-only copy,
        then a delete only while BOOTSTRAP.md is still the copied version. A retry after a
        failure between the two finds the same name holding the same text and finishes."""
        space = await self._authorize(principal, Action.WRITE, space)
        await self._writes.check(principal, space.id)
        current = await self._documents.get(principal, space, rules.BOOTSTRAP_PATH)
        if current is None:
            raise DocumentNotFound(
                f"no {rules.BOOTSTRAP_PATH} in this workspace: onboarding is already complete"
            )
        archive = rules.archived_bootstrap_path(current.updated_at)
        try:
            await self._documents.write(
                principal, space, archive, current.content, append=False, create_only=True
            )
        except EtagMismatch as taken:
            if taken.current_sha256 != current.sha256:
                raise
        try:
            await self._documents.delete(
                principal, space, rules.BOOTSTRAP_PATH, expected_sha256=current.sha256
            )
        except DocumentNotFound:
            pass  # a concurrent completion deleted it after archiving the same version
        return archive

    # --- reads -------------------------------------------------------------------------------

    async def read(
        self, principal: Principal, space: SpaceRef, path: str, *, by_date: DateRead | None = None
    ) -> WorkspaceDocument:
        """The document at `path`, or (`by_date`, with no path) a day's log."""
        space = await self._authorize(principal, Action.READ, space)
        if by_date is not None and by_date.date:
            if path:
                raise InvalidArgument("name a path or a date, not both", field="date")
            return await self._read_day(principal, space, by_date)
        validate_document_path(path)
        document = await self._documents.get(principal, space, path)
        if document is None:
            raise DocumentNotFound(f"no document at {quoted(path)} in this workspace")
        return document

    async def _read_day(
        self, principal: Principal, space: SpaceRef, by_date: DateRead
    ) -> WorkspaceDocument:
        today = rules.local_now(self._clock(), rules.time_zone(by_date.time_zone)).date()
        day = rules.log_day(by_date.date, today)
        candidates = rules.log_paths_of(day, rules.session_name(by_date.session))
        for path in candidates:
            document = await self._documents.get(principal, space, path)
            if document is not None:
                return document
        raise DocumentNotFound(
            f"no daily log for {day.isoformat()} in this workspace ({' or '.join(candidates)})"
        )

    async def tree(
        self, principal: Principal, space: SpaceRef, path: str, depth: int
    ) -> list[TreeNode]:
        space = await self._authorize(principal, Action.LIST, space)
        root = validate_directory(path, field="path")
        levels = rules.tree_depth(depth)
        paths = await self._documents.list_paths(
            principal, space, root, limit=MAX_TREE_DOCUMENTS + 1
        )
        if len(paths) > MAX_TREE_DOCUMENTS:
            raise InvalidArgument(
                f"{quoted(root or '/')} holds more than {MAX_TREE_DOCUMENTS} documents; "
                "ask for the tree of a subdirectory (path)",
                field="path",
            )
        return rules.build_tree(root, paths, levels)

    async def system_prompt(
        self,
        principal: Principal,
        space: SpaceRef,
        *,
        group_context: bool,
        time_zone: str = "",
        layout: PromptLayout | None = None,
    ) -> AssembledPrompt:
        """The identity files, MEMORY.md (not in group contexts) and today's and yesterday's
        daily logs in the caller's time zone; records SOUL.md's sha256 as the agent's
        baseline, so a change is announced exactly once."""
        space = await self._authorize(principal, Action.READ, space)
        today = rules.local_now(self._clock(), rules.time_zone(time_zone)).date()
        days = {today, today - timedelta(days=1)}
        # The shared logs by name (found even past the listing's bound), journals by listing.
        logs = [rules.daily_log_path(day) for day in sorted(days, reverse=True)]
        listed = await asyncio.gather(
            *(
                self._documents.list_paths(principal, space, directory, limit=MAX_TREE_DOCUMENTS)
                for directory in rules.JOURNAL_DIRS
            )
        )
        # Session journals of daily/, and every log of memory/ (the OpenClaw/Minara layout).
        journals = [
            path
            for path in (p for paths in listed for p in paths)
            if (parsed := rules.parse_daily_log_path(path)) is not None
            and parsed[0] in days
            and (parsed[1] or not path.startswith(f"{rules.DAILY_DIR}/"))
        ]
        logs += journals[:MAX_PROMPT_JOURNALS]
        wanted = [*IDENTITY_PATHS, *logs]
        documents = await asyncio.gather(
            *(self._documents.get(principal, space, path) for path in wanted)
        )
        found = {doc.path: doc for doc in documents if doc is not None}
        files = {path: _prompt_file(found[path]) for path in IDENTITY_PATHS if path in found}
        previous = await self._agents.swap_soul(
            rules.agent_key(principal, space.id), soul_baseline(files)
        )
        return assemble_prompt(
            files,
            [_prompt_file(found[path]) for path in logs if path in found],
            today=today,
            group_context=group_context,
            previous_soul_sha256=previous,
            layout=layout or self._policy.prompt_layout,
        )

    async def search(
        self,
        principal: Principal,
        space: SpaceRef,
        query: str,
        limit: int,
        *,
        wait: PositionWait = NO_WAIT,
        min_relevance: float | None = None,
    ) -> MemoryHits:
        """`wait`: answer once the indexes hold these writes (SearchService checks that
        each position names the searched space). `min_relevance`: None = the service's
        default, which returns nothing when nothing relevant is stored."""
        space = await self._authorize(principal, Action.SEARCH, space)
        text = rules.search_query(query)
        floor = self._min_relevance if min_relevance is None else rules.min_relevance(min_relevance)
        return await self._search.search(
            principal,
            space,
            text,
            limit=rules.search_limit(limit),
            wait=wait,
            min_relevance=floor,
        )


def _prompt_file(document: WorkspaceDocument) -> PromptFile:
    return PromptFile(path=document.path, content=document.content, sha256=document.sha256)
