"""A run's own packages on a node: an environment of the cluster's, layered on the node's Python.

argv: ENV_DIR REQUIREMENTS_TEXT REQUIREMENTS_FILE [FIND_LINKS...]. Run with the node's Python (the one
with torch). REQUIREMENTS_FILE: the file in the project's copy, so that files it includes (``-r``)
are found beside it; "": none, the text alone.

``ENV_DIR`` becomes a venv of that Python whose ``site-packages`` comes first and whose ``.pth``
then lists every folder of the node Python's own path (its venv, its system's, the user's site):
torch and everything else of the node is seen, and only what the requirements add or change is
installed into the layer (``pip install -r`` with the layer's Python and the node's pip, the user's
pip config and ``PIP_*`` as pip reads them; each FIND_LINKS folder as ``--find-links``). The
layer is made under an exclusive ``flock`` (two runs, or two nodes sharing a filesystem, install
once) and marked done only once pip succeeded: a later run with the same ``ENV_DIR`` (named by the
requirements' hash) reuses it.

Prints ``reused ENV_DIR`` or ``installed ENV_DIR``, exit 0; on a failure one line, ``pip: <pip's
last error line>``, exit 1 (the folder is left unmarked, made again by the next run).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import venv

#: written last: the layer is complete (its text: the node Python that it layers on)
MARKER = ".ddpctl-done"


def stamp() -> str:
    """What a layer is made for: this Python (its path and version); another one makes it again."""
    return f"{os.path.realpath(sys.executable)} {sys.version.split()[0]}\n"


def node_paths() -> list[str]:
    """This Python's own folders of packages, as its ``sys.path`` has them (.pth files expanded),
    the standard library's left out (the layer has the same)."""
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    std = {stdlib, os.path.join(stdlib, "lib-dynload")}
    out = []
    for path in sys.path[1:]:  # [0]: the cwd ('' under -c) or a script's folder
        if not os.path.isdir(path) or os.path.realpath(path) in std:
            continue  # a zip, the stdlib, lib-dynload
        if path not in out:
            out.append(path)
    return out


def last_error(output: str) -> str:
    """pip's own last error line (its last ``ERROR:`` line, else its last line)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    found = (errors or lines or ["pip failed and said nothing"])[-1]
    return found[len("ERROR:") :].strip() if found.startswith("ERROR:") else found


def layer_python(env_dir: str) -> str:
    return os.path.join(env_dir, "bin", "python")


def make_layer(env_dir: str) -> None:
    """A venv of this Python (no pip of its own where this Python has one) whose path goes on to
    this Python's packages."""
    shutil.rmtree(env_dir, ignore_errors=True)  # an earlier attempt's, unfinished
    has_pip = importlib.util.find_spec("pip") is not None  # else the layer's own, from ensurepip
    try:
        venv.EnvBuilder(symlinks=True, with_pip=not has_pip, clear=True).create(env_dir)
    except subprocess.CalledProcessError:  # ensurepip failed (a Debian Python without python3-venv)
        raise OSError(
            f"{sys.executable} has no pip and ensurepip could not give the environment one: install pip for it"
        ) from None
    found = subprocess.run(
        [layer_python(env_dir), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    site = found.stdout.strip()
    # as site folders: the .pth files in them (editable installs, chained venvs) are read too
    with open(os.path.join(site, "zz_ddpctl_node.pth"), "w", encoding="utf-8") as f:
        f.write(f"import site; list(map(site.addsitedir, {node_paths()!r}))\n")


def install(env_dir: str, requirements: str, path: str, find_links: list[str]) -> str | None:
    """Make the layer and install into it; None, or pip's last error line."""
    make_layer(env_dir)
    req = os.path.join(env_dir, "requirements.txt")  # kept: what the layer was made from
    with open(req, "w", encoding="utf-8") as f:
        f.write(requirements)
    req = path if path and os.path.isfile(path) else req
    links = [arg for folder in find_links for arg in ("--find-links", folder)]
    argv = [layer_python(env_dir), "-m", "pip", "install", "--disable-pip-version-check", "-r", req, *links]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PIP_TARGET", "PIP_PREFIX")}
    env.pop("PIP_USER", None)  # into the layer, never the user's site
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return last_error(done.stdout + "\n" + done.stderr)
    with open(os.path.join(env_dir, MARKER), "w", encoding="utf-8") as f:
        f.write(stamp())
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env_dir, requirements, path, find_links = args[0], args[1], args[2], args[3:]
    os.makedirs(os.path.dirname(env_dir) or ".", exist_ok=True)
    with open(f"{env_dir}.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run (or node on this filesystem) installs: wait for it
        try:
            with open(os.path.join(env_dir, MARKER), encoding="utf-8") as f:
                if f.read() == stamp():
                    print(f"reused {env_dir}", flush=True)
                    return 0
        except OSError:
            pass
        try:
            error = install(env_dir, requirements, path, find_links)
        except (OSError, subprocess.CalledProcessError) as exc:
            error = f"could not make {env_dir}: {exc}"
            print(error, flush=True)
            return 1
    if error is not None:
        print(f"pip: {error}", flush=True)
        return 1
    print(f"installed {env_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
