"""Who is at the keyboard: the OS account a command runs as, journaled next to the name given."""

from __future__ import annotations

import getpass
import os


def current_os_user() -> str | None:
    """The account of the process's real uid (from the password database, which the caller's
    environment cannot change), else what getpass says; None when neither can tell."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        pass
    try:
        return getpass.getuser()
    except Exception:  # getpass raises whatever its last fallback raises (OSError, KeyError)
        return None
