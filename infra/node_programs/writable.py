"""Can this user write a directory, or create it (its nearest existing ancestor writable)?

argv: PATH. Prints nothing and exits 0 when it can; otherwise prints one line, the reason
(``/data is not writable by alice``), and exits 1. Checking creates nothing. Run on every node
before a run with ``--snapshot-dir`` (``infra/launch/ssh_executor.py``), and on this machine for local nodes.
"""

from __future__ import annotations

import errno
import getpass
import os
import sys


def problem(path: str) -> str | None:
    """Why this user cannot write or create ``path`` (None: it can)."""
    probe = path
    while True:
        try:
            os.stat(probe)
            break
        except OSError as exc:
            # missing, or under a file (judged below, at the file): look at its parent
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                return exc.strerror or str(exc)  # a name too long, a loop of links...
            if os.path.dirname(probe) == probe:
                break
            probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by {getpass.getuser()}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    reason = problem(args[0])
    if reason:
        print(reason, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
