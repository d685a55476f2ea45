"""The page token of a paged directory listing: the directory and the last name already
listed. The master makes and reads them (master/directory_pages.py); a client makes one
to start a listing after a name it chooses (`AsyncClient.iter_ls(start_after=...)`, the
S3 gateway resuming a ListObjects page)."""

from __future__ import annotations

import base64
import binascii
import json

from reservoir.common.errors import InvalidArgument


def page_token(directory: str, after: str) -> str:
    """The token of the page that follows `after` (a name) in `directory`."""
    raw = json.dumps({"dir": directory, "after": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def name_after(token: str, directory: str) -> str:
    """The last name already listed, from a token of `directory`'s listing."""
    try:
        fields = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
        owner, after = fields["dir"], fields["after"]
    except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error):
        raise InvalidArgument("bad page token: pass next_page_token as it came") from None
    if not isinstance(owner, str) or not isinstance(after, str) or not after:
        raise InvalidArgument("bad page token: pass next_page_token as it came")
    if owner != directory:
        raise InvalidArgument(f"the page token is of a listing of {owner}, not of {directory}")
    return after
