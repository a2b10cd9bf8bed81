"""A server's working directory, when its user cannot enter it.

The processes a server starts (the vector engine, `engram serve search --workers`) begin by
changing into their parent's working directory: multiprocessing's spawn and its fork server
both do. A server started from a directory its user cannot enter (`sudo -u engram engram
dev` from a private home) ran until it started one, then lost it ("Permission denied").
Such a server now moves to "/" at start, after making its relative path settings absolute,
so they name what they named before (and fail as they would have, if they are in there).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from engram.runtime.settings import Settings

log = logging.getLogger(__name__)


def leave_unenterable_working_dir(settings: Settings) -> Settings:
    """`settings` unchanged when the working directory can be entered; else with relative
    paths made absolute, once this process has moved to "/"."""
    try:
        here = Path.cwd()
    except FileNotFoundError:  # removed: nothing relative could be resolved in it anyway
        os.chdir("/")
        log.warning("working directory removed: moved to /")
        return settings
    if os.access(here, os.X_OK):
        return settings
    absolute = {
        name: here / value
        for name, value in settings
        if isinstance(value, Path) and not value.is_absolute()
    }
    os.chdir("/")
    log.warning(
        "working directory cannot be entered by this user: moved to /",
        extra={"path": str(here), "uid": os.getuid()},
    )
    return settings.model_copy(update=absolute)
