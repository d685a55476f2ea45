"""Loading mfusepy over libfuse 3, with an error that says what to install."""

from __future__ import annotations

import os
from types import ModuleType


class SetupError(Exception):
    """The serving process cannot work here; retrying would not help."""


def load_mfusepy() -> ModuleType:
    # mfusepy takes libfuse 2 when both are installed; the mount options here are libfuse 3's.
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    try:
        import mfusepy
    except ImportError as exc:
        raise SetupError(
            "`reservoir fuse` needs mfusepy: pip install 'reservoir-cache[fuse]'"
        ) from exc
    except (OSError, AttributeError) as exc:  # no libfuse, or one mfusepy cannot use
        raise SetupError(f"libfuse 3 is needed (apt-get install fuse3): {exc}") from exc
    return mfusepy
