"""A run's output folders on a node: how big they are, and their contents as a tar stream.

argv: ``sizes PATH...``: prints one JSON list, for each PATH ``[bytes, files]`` (what its regular
files hold and how many), or null where PATH is not a folder or holds no file.
``tar PATH``: writes the folder's contents (relative names, no links followed) to stdout as an
uncompressed tar stream; exits 1 with one line on stderr where PATH is not a folder.

Run on a cluster's head node by ``infra/runs/outputs.py`` (``down`` keeping outputs, ``ddpctl download``).
"""

from __future__ import annotations

import json
import os
import sys
import tarfile


def size(path: str) -> list[int] | None:
    """[bytes, files] of the regular files under ``path`` (None: not a folder, or no file in it)."""
    if not os.path.isdir(path):
        return None
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue  # gone meanwhile
            if not os.path.islink(os.path.join(root, name)):
                total += st.st_size
                files += 1
    return [total, files] if files else None


def tar(path: str, out) -> None:
    with tarfile.open(fileobj=out, mode="w|") as archive:
        for name in sorted(os.listdir(path)):
            archive.add(os.path.join(path, name), arcname=name)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "sizes":
        print(json.dumps([size(p) for p in args[1:]]), flush=True)
        return 0
    if len(args) == 2 and args[0] == "tar":
        if not os.path.isdir(args[1]):
            print(f"{args[1]} is not a folder", file=sys.stderr, flush=True)
            return 1
        tar(args[1], sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    print("usage: outputs.py sizes PATH... | tar PATH", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
