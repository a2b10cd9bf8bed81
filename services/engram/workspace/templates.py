"""The files SeedWorkspace copies into a new agent workspace.

The defaults ship as package data (`templates/` beside this module). An operator overrides
them per file with a directory (ENGRAM_WORKSPACE_TEMPLATES): each of SEED_PATHS found there
replaces the default of that name, the others keep their default, and any other file in the
directory is ignored. HEARTBEAT.md is never seeded: the agent and the operator create it.
Every template must pass the document content rules (UTF-8 text, no NUL, no credential, at
most the default document size), else the server refuses to start with the file named.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from engram.domain.content import DEFAULT_MAX_DOC_BYTES, check_size, check_text, decode_utf8
from engram.domain.errors import EngramError, Misconfigured

SEED_PATHS = ("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md", "BOOTSTRAP.md")


def load_templates(override_dir: Path | None) -> dict[str, str]:
    """Path -> text of every seed template, in SEED_PATHS order; raises Misconfigured."""
    if override_dir is not None and not override_dir.is_dir():
        raise Misconfigured(
            f"ENGRAM_WORKSPACE_TEMPLATES is {str(override_dir)!r}, which is not a directory: "
            "point it at a directory holding some of " + ", ".join(SEED_PATHS)
        )
    defaults = files("engram.workspace") / "templates"
    templates: dict[str, str] = {}
    for path in SEED_PATHS:
        override = override_dir / path if override_dir is not None else None
        if override is not None and override.is_file():
            templates[path] = _checked(override.read_bytes(), str(override))
        else:
            templates[path] = _checked((defaults / path).read_bytes(), f"default template {path}")
    return templates


def _checked(data: bytes, where: str) -> str:
    what = f"workspace template {where}"
    try:
        check_size(len(data), DEFAULT_MAX_DOC_BYTES, what=what)
        text = decode_utf8(data, what=what)
        check_text(text, what=what)
    except EngramError as error:
        raise Misconfigured(f"{error.message} (ENGRAM_WORKSPACE_TEMPLATES)") from None
    return text
