"""The cluster's SSH key: made on this machine (ed25519), private half 0600 in the cluster dir.

Only the public half goes to EC2 (ImportKeyPair); AWS never sees the private key. cryptography
is imported when a key is made or read (it is slow to load).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ...model.errors import DdpctlError


def ensure_key(path: Path, comment: str) -> str:
    """Create the key at ``path`` unless it exists; return the public key (OpenSSH line)."""
    if path.exists():
        return public_key(path, comment)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    except ImportError:  # pragma: no cover - cryptography comes with paramiko
        return _ssh_keygen(path, comment)
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = f"{public.decode()} {comment}"
    _write_private(path, private)
    path.with_name(path.name + ".pub").write_text(line + "\n")
    return line


def public_key(path: Path, comment: str) -> str:
    pub = path.with_name(path.name + ".pub")
    if pub.is_file():
        return pub.read_text().strip()
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
    raw = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{raw.decode()} {comment}"


def throwaway_public_key() -> bytes:
    """A fresh public key for ImportKeyPair's dry run (its private half is never kept)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )


def remove_key(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".pub").unlink(missing_ok=True)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(path, 0o600)  # whatever the umask


def _ssh_keygen(path: Path, comment: str) -> str:  # pragma: no cover - fallback
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise DdpctlError(
            f"cannot make an SSH key ({exc}): install openssh-client or `pip install cryptography`"
        ) from None
    os.chmod(path, 0o600)
    return path.with_name(path.name + ".pub").read_text().strip()
