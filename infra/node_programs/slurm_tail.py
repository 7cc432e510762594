"""Follow every node's Slurm output file, printing ``NODE<TAB>LINE`` as lines are written.

argv: FOLDER PREFIX [once]. Reads every ``PREFIX<NODE>.out`` in FOLDER, those that appear later
too, from where it left off, every 0.2 s; a line is printed once its newline is written. Runs until
it is killed, or until its SSH session is gone (a follower killed with no word: its parent, the
session, ended); with ``once``, reads every file to its end once (node by node) and exits.
"""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    folder, prefix = args[0], args[1]
    once = args[2:] == ["once"]
    parent = os.getppid()
    offsets, partial = {}, {}
    while True:
        for name in sorted(os.listdir(folder)):
            if not (name.startswith(prefix) and name.endswith(".out")):
                continue
            node = name[len(prefix) : -4]
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    f.seek(offsets.get(name, 0))
                    data = f.read()
                    offsets[name] = f.tell()
            except OSError:
                continue
            *lines, partial[name] = (partial.get(name, b"") + data).split(b"\n")
            for line in lines:
                sys.stdout.write(node + "\t" + line.decode(errors="replace") + "\n")
        sys.stdout.flush()
        if once or os.getppid() != parent:  # orphaned: nobody reads any more
            return
        time.sleep(0.2)


if __name__ == "__main__":
    main()
