"""The options a run was started with (``ddpctl run``'s flags, the API's keywords, ``options.json``'s
``options``): ``RunOptions``, what ``run --resume`` reads again, each field checked as a record is read;
``RUN_FLAGS`` maps the CLI's and the API's names to its fields once for both."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ..model.errors import UsageError
from ..model.schema import Doc, SchemaError, shown, whole
from ..model.spec import MAX_NODES, MAX_NPROC, check_cluster_name, check_run_id
from ..model.state import LaunchKind

#: ``--nproc-per-node`` words, as torchrun spells them: ``gpu``, each node's GPUs (refused on a node
#: without); ``auto``, its GPUs, or 1 on a node without (torchrun's own ``auto`` counts CPUs there;
#: the local provider's bound on ranks per CPU applies to every count: ``ranks.node_nprocs``).
NPROC_WORDS = ("gpu", "auto")


#: ``run``'s flags that are its options (the command's parameter names, the API's keywords) -> ``RunOptions``' fields
RUN_FLAGS = {
    **{same: same for same in ("nodes", "nproc_per_node", "max_restarts", "name", "port", "run_id", "launcher")},
    **{same: same for same in ("snapshot_dir", "workdir", "requirements", "resume_from", "env_files", "python")},
    "hang_timeout": "hang_timeout_s",
    "health_every": "health_every_s",
}


@dataclass(frozen=True)
class RunOptions:
    """``ddpctl run``'s options as given (None: not given)."""

    job: str
    args: tuple[str, ...] = ()
    nodes: int | None = None  # None: every node of the cluster that is up, else one (a local cluster for the run)
    nproc_per_node: int | tuple[int, ...] | str | None = None  # str: gpu | auto (NPROC_WORDS)
    max_restarts: int | None = None  # None: 0, or 3 for an elastic run
    name: str | None = None
    port: int | None = None
    run_id: str = ""
    env: tuple[str, ...] = ()  # as given: KEY=VALUE, or a bare KEY (a secret from the caller's environment)
    env_files: tuple[str, ...] = ()  # --env-file: every value a secret, read again by `run --resume`
    python: str | None = None
    launcher: str | None = None  # torchrun | sbatch; None: the cluster's (sbatch where Slurm runs)
    min_nodes: int = 0  # elastic (--nodes MIN:MAX): go on while this many nodes remain
    snapshot_dir: str = ""  # DDPCTL_SNAPSHOT_DIR for the jobs: a directory or s3://bucket/prefix
    workdir: str = ""  # a user's script: its project's directory ("": the script's), shipped to remote nodes
    resume_from: str = ""  # another run's id: start from its snapshot (kept outputs, or its folder)
    #: the run's own packages (launch/deps.py): a requirements file; "": the project's requirements.txt; none: no packages
    requirements: str = ""
    hang_timeout_s: int | None = None  # None: the default (model/spec.py's HANG_TIMEOUT_S); 0: off
    health_every_s: int | None = None  # None: the default (model/spec.py's HEALTH_EVERY_S); 0: off

    @classmethod
    def of_flags(cls, job: str, args: tuple[str, ...] | list[str], env: tuple[str, ...] | list[str], flags: dict):
        """The options from ``run``'s flags by their parameter names (``RUN_FLAGS``), as the CLI's command
        and the Python API's ``run`` both hold them: one mapping for both faces."""
        given = {field: flags[flag] for flag, field in RUN_FLAGS.items()}
        return cls.given(
            job, args, env=env, **{**given, "run_id": given["run_id"] or "", "env_files": given["env_files"] or ()}
        )

    @classmethod
    def given(
        cls,
        job: str,
        args: tuple[str, ...] | list[str],
        *,
        nodes: int | tuple[int, int] | None,
        env: tuple[str, ...] | list[str] = (),
        env_files: tuple[str, ...] | list[str] = (),
        resume_from: str | None = None,
        workdir: str | None = None,
        requirements: str | None = None,
        **rest,
    ) -> RunOptions:
        """The options as the command line (or the Python API) gives them: ``nodes`` as a count or
        an elastic (MIN, MAX), files made absolute (a detached or resumed run starts elsewhere)."""
        min_nodes, count = nodes if isinstance(nodes, tuple) else (0, nodes)
        return cls(
            job=job,
            args=tuple(args),
            nodes=count,
            min_nodes=min_nodes,
            env=tuple(env),
            env_files=tuple(str(Path(f).resolve()) for f in env_files),
            resume_from=resume_from or "",
            workdir=str(Path(workdir).resolve()) if workdir else "",
            requirements=""
            if not requirements
            else "none"
            if requirements == "none"
            else str(Path(requirements).resolve()),
            **rest,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "options") -> RunOptions:
        """A record's options, every field checked (``model/schema.py``): ``SchemaError`` names the
        first that is not what ddpctl writes there."""
        doc = Doc(data, where)
        nproc = doc.raw("nproc_per_node", None)
        if isinstance(nproc, list):
            nproc = tuple(whole(n, f"{doc.at('nproc_per_node')}[{i}]", 1, MAX_NPROC) for i, n in enumerate(nproc))
        elif nproc is not None:
            nproc = (
                doc.choice("nproc_per_node", NPROC_WORDS)
                if isinstance(nproc, str)
                else doc.count("nproc_per_node", low=1, high=MAX_NPROC)
            )
        run_id = doc.text("run_id", "")
        name = doc.text("name", None)
        for key, value, check in (("run_id", run_id, check_run_id), ("name", name, check_cluster_name)):
            if value:
                try:
                    check(value)
                except UsageError:
                    raise SchemaError(
                        doc.at(key), f"{shown(value)}, not a {key.replace('_', ' ')} ddpctl gives"
                    ) from None
        options = cls(
            job=doc.text("job"),
            args=doc.texts("args", ()),
            nodes=doc.count("nodes", None, low=1, high=MAX_NODES),
            nproc_per_node=nproc,
            max_restarts=doc.count("max_restarts", None),
            name=name,
            port=doc.count("port", None, low=1, high=65535),
            run_id=run_id,
            env=doc.texts("env", ()),
            env_files=doc.texts("env_files", ()),
            python=doc.text("python", None),
            launcher=doc.choice("launcher", [str(w) for w in LaunchKind], None),
            min_nodes=doc.count("min_nodes", 0, high=MAX_NODES),
            snapshot_dir=doc.text("snapshot_dir", ""),
            workdir=doc.text("workdir", ""),
            requirements=doc.text("requirements", ""),
            resume_from=doc.text("resume_from", ""),
            hang_timeout_s=doc.count("hang_timeout_s", None, high=30 * 86400),
            health_every_s=doc.count("health_every_s", None, high=30 * 86400),
        )
        doc.done()
        return options
