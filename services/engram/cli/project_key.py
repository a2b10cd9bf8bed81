"""The current directory's project key: the `--project` a command uses when it addresses a
bot or project space and none is given.

The key names the workspace root: the root of the git work tree the current directory is in
(the nearest parent holding `.git`), or the current directory itself outside one. It is
`<name>-<hash>`: `<name>` is the root directory's own name with every character outside
`A-Z a-z 0-9 . _ -` replaced by `-` (at most 40 characters), and `<hash>` the first 12 hex
digits of the SHA-256 of the root's canonical path (absolute, symlinks resolved, UTF-8). So
every checkout of a project gets its own key, the same from any of its subdirectories, and
the key is a valid space qualifier (no `/`, `:` or `..`, far below 128 bytes).
"""

import hashlib
import re
from pathlib import Path

NAME_CHARS = 40
HASH_CHARS = 12
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def workspace_root(start: Path | None = None) -> Path:
    """The git work tree's root above `start` (default: the current directory), or `start`."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate
    return here


def project_key(root: Path) -> str:
    """`<name>-<hash>` for the workspace root `root` (see the module's docstring)."""
    canonical = root.resolve()
    name = _UNSAFE.sub("-", canonical.name)[:NAME_CHARS].strip(".") or "root"
    digest = hashlib.sha256(str(canonical).encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{name}-{digest}"


def current_project_key() -> str:
    return project_key(workspace_root())
