"""How ddpctl itself was installed, for hints that say how to add an extra (``train``: torch).

``ddpctl`` is not on a package index: ``pip install 'ddpctl[train]'`` would find nothing (or another
project). The command is derived from the installed distribution instead: an editable checkout
(``pip install -e 'PATH[train]'``), else where pip got it from as it recorded in
``direct_url.json`` (PEP 610: a git URL and revision, a local directory or a wheel), else the plain
form (an index, should it ever be published there).
"""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from urllib.parse import unquote, urlparse

DIST = "ddpctl"


def direct_url() -> dict | None:
    """The installed distribution's PEP 610 record, or None (from an index, or not installed). The
    first distribution of that name that has one: a build's ``ddpctl.egg-info`` in the working
    directory is found too, and has none."""
    for dist in metadata.distributions(name=DIST):
        text = dist.read_text("direct_url.json")
        if text:
            try:
                return json.loads(text)
            except ValueError:
                return None
    return None


def requirement(extra: str, record: dict | None = None) -> str:
    """What to give pip (one shell word) to install ddpctl with ``extra`` from where it came from."""
    record = direct_url() if record is None else record
    if not record or "url" not in record:
        return shlex.quote(f"{DIST}[{extra}]")
    url = record["url"]
    vcs = record.get("vcs_info")
    if vcs:
        revision = vcs.get("requested_revision") or vcs.get("commit_id") or ""
        at = f"@{revision}" if revision else ""
        subdir = f"#subdirectory={record['subdirectory']}" if record.get("subdirectory") else ""
        return shlex.quote(f"{DIST}[{extra}] @ {vcs.get('vcs', 'git')}+{url}{at}{subdir}")
    if "dir_info" in record and url.startswith("file://"):
        path = unquote(urlparse(url).path)
        editable = "-e " if record["dir_info"].get("editable") else ""
        return editable + shlex.quote(f"{path}[{extra}]")
    return shlex.quote(f"{DIST}[{extra}] @ {url}")


def pip_install(extra: str, python: str = "", record: dict | None = None) -> str:
    """The whole command: ``PYTHON -m pip install REQUIREMENT`` (``pip install ...`` with no python)."""
    pip = f"{shlex.quote(python)} -m pip" if python else "pip"
    return f"{pip} install {requirement(extra, record)}"
