"""Who may change a cluster now: one command at a time, by ``flock`` on files in the state home.

``up``, ``down`` and ``configure`` hold a cluster exclusively; a ``run`` holds it shared, so
none of those commands can change it under a run (``down`` during a run is refused, naming the
run). Runs take turns on a cluster: each also takes the cluster's run slot (``RunSlot``), and a
second run waits for it (the queue: the kernel wakes one waiter as the slot is freed). Every run also holds a lock of its own while it is
alive, so ``run --resume ID`` refuses a run that still runs. A second command is refused at once,
in one line that says who holds the cluster (command, pid, since when). The kernel releases a
lock when its process dies, so a crashed or killed command leaves no stale lock: the next one
takes it over.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import DdpctlError
from .store import StateStore

#: how long a refused command waits to learn who holds the lock (its holder writes who it is just after it
#: locks) or for it to let go: a liveness bound, generous for a loaded machine (it is milliseconds idle)
HOLDER_WAIT_S = 10.0


class Busy(DdpctlError):
    """Another ddpctl command holds the cluster (or the run)."""


@dataclass(frozen=True)
class Holder:
    command: str  # e.g. "up", "run r1234 (mnist)"
    pid: int
    since: float

    def describe(self) -> str:
        return f"`ddpctl {self.command}` (pid {self.pid}) since {time.strftime('%H:%M:%S', time.localtime(self.since))}"


class _Lock:
    """One lock file; its holders write who they are beside it (``<lock>.<pid>.json``), for messages.

    The last holder removes the file (and the folder, if it is empty), so a state home where no
    command runs holds no lock files; a holder checks after locking that the file it locked is
    still the one at the path (the usual guard against a lock file removed meanwhile).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def _holder_file(self, pid: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{pid}.json")

    def acquire(self, command: str, shared: bool) -> bool:
        for _ in range(20):
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the folder went with another holder's release: again
                continue
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                me = Holder(command, os.getpid(), time.time())
                try:  # who holds it, for others' messages; not needed to hold it (a full disk)
                    self._holder_file(me.pid).write_text(json.dumps(asdict(me)))
                except OSError:
                    self._holder_file(me.pid).unlink(missing_ok=True)
                return True
            os.close(fd)  # removed by its last holder after we opened it: lock the new one
        raise DdpctlError(f"could not lock {self.path}: it keeps being replaced")

    def release(self) -> None:
        if self.fd is None:
            return
        self._holder_file(os.getpid()).unlink(missing_ok=True)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the last holder: nothing to leave behind
        except BlockingIOError:
            pass
        else:
            for stale in self.path.parent.glob(f"{self.path.name}.*.json"):  # of killed holders: none holds it now
                stale.unlink(missing_ok=True)
            self.path.unlink(missing_ok=True)
            try:
                self.path.parent.rmdir()
            except OSError:
                pass  # not empty: the state lives there
        os.close(self.fd)  # releases the flock
        self.fd = None

    def holders(self) -> list[Holder]:
        """Who holds it now (processes that are gone are not listed)."""
        out = []
        for file in sorted(self.path.parent.glob(f"{self.path.name}.*.json")):
            try:
                holder = Holder(**json.loads(file.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if holder.pid != os.getpid() and _alive(holder.pid):
                out.append(holder)
        return out


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs. A zombie does not: a detached ddpctl killed after its
    parent exited waits as one for ever where PID 1 reaps no orphans (a container without an init)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone just now, or no /proc (macOS: kill's answer stands)
        return not Path("/proc/self").is_dir()
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _run_lock(store: StateStore, run_id: str) -> _Lock:
    return _Lock(store.run_dir(run_id).with_name(f".{run_id}.lock"))


class ClusterLock:
    """A command's hold on one cluster: exclusive (up, down, configure) or shared (a run)."""

    def __init__(self, store: StateStore, name: str, command: str) -> None:
        self.lock, self.name, self.command = _Lock(store.lock_path(name)), name, command
        self.store = store

    def take(self, *, shared: bool = False) -> ClusterLock:
        self.store.check_writable()  # one line for an unwritable state home, before making anything
        deadline = time.monotonic() + HOLDER_WAIT_S
        while not self.lock.acquire(self.command, shared):
            holders = self.lock.holders()
            if holders or time.monotonic() > deadline:  # refused, saying who holds it
                raise self._busy(shared, holders)
            time.sleep(0.1)  # a holder not yet written, or one letting go: take it then
        return self

    def share(self) -> None:
        """Keep holding it, shared: other runs may use the cluster now (an owned cluster that is up)."""
        if self.lock.fd is not None:
            fcntl.flock(self.lock.fd, fcntl.LOCK_SH)

    def try_exclusive(self) -> bool:
        """Hold it exclusively again if no other command uses it now (to take an owned cluster down)."""
        if self.lock.fd is None:
            return False
        try:
            fcntl.flock(self.lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def others(self) -> list[Holder]:
        return self.lock.holders()

    def release(self) -> None:
        self.lock.release()

    def _busy(self, shared: bool, holders: list[Holder]) -> Busy:
        runs = [h for h in holders if h.command.startswith("run ")]
        if runs and not shared:
            return Busy(
                f"cluster {self.name!r} is in use by {', '.join(h.describe() for h in runs)}: wait for the run to end, "
                f"or stop it (Ctrl-C where it runs, or `kill {runs[0].pid}`), then `ddpctl {self.command.split()[0]}` again"
            )
        who = ", ".join(h.describe() for h in holders) or "another ddpctl command"
        return Busy(f"cluster {self.name!r} is busy: {who} is changing it; wait for it to finish, then try again")


class RunSlot:
    """A cluster's run slot: one run at a time trains on a cluster, the others wait their turn."""

    def __init__(self, store: StateStore, name: str, command: str) -> None:
        self.lock, self.command = _Lock(store.lock_path(name, ".runs")), command

    def try_take(self) -> bool:
        return self.lock.acquire(self.command, shared=False)

    def wait(self) -> None:
        """Block until the slot is free and take it (Ctrl-C, or ``ddpctl stop``'s signal, ends the wait)."""
        while not self.lock.acquire(self.command, shared=False):
            assert self.lock.fd is None
            fd = os.open(self.lock.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # asleep until the holder lets go
                fcntl.flock(fd, fcntl.LOCK_UN)  # then take it the usual way (its holder file, its checks)
            finally:
                os.close(fd)

    def holders(self) -> list[Holder]:
        return self.lock.holders()

    def release(self) -> None:
        self.lock.release()


@contextmanager
def cluster(store: StateStore, name: str, command: str, *, shared: bool = False) -> Iterator[ClusterLock]:
    """Hold cluster ``name`` for ``command`` (``shared``: a run), or raise Busy naming the holder."""
    lock = ClusterLock(store, name, command).take(shared=shared)
    try:
        yield lock
    finally:
        lock.release()


@contextmanager
def run(store: StateStore, run_id: str, command: str) -> Iterator[None]:
    """Hold run ``run_id`` while it is alive (``run --resume`` checks it with ``check_run_free``)."""
    lock = _run_lock(store, run_id)
    store.check_writable()
    if not lock.acquire(command, shared=False):
        raise _run_busy(run_id, lock)
    try:
        yield
    finally:
        lock.release()


def check_run_free(store: StateStore, run_id: str) -> None:
    """Raise Busy if run ``run_id`` is still alive (its ddpctl still runs)."""
    lock = _run_lock(store, run_id)
    if not lock.path.exists():
        return
    try:
        if not lock.acquire("check", shared=False):
            raise _run_busy(run_id, lock)
    finally:
        lock.release()


def _run_busy(run_id: str, lock: _Lock) -> Busy:
    holders = lock.holders()
    who = holders[0].describe() if holders else "another ddpctl"
    pid = f"`kill {holders[0].pid}`" if holders else "Ctrl-C where it runs"
    return Busy(f"run {run_id} is still running ({who}): let it finish, or stop it ({pid}) before resuming it")


def run_holders(store: StateStore, run_id: str) -> list[Holder]:
    """Who holds run ``run_id`` (its ddpctl, while it runs); reads, takes nothing."""
    return _run_lock(store, run_id).holders()


def run_alive(store: StateStore, run_id: str) -> bool:
    """Whether run ``run_id``'s ddpctl still runs (it holds the run's lock); reads, takes nothing."""
    return bool(run_holders(store, run_id))
