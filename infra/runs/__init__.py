"""A run from its job to its record: bundled jobs, preparing a run (the plan, nothing created),
executing it (its slot, its ephemeral cluster, its output and record), detached runs and `stop`, and
what reads runs back (`logs`, `metrics`, `runs`) or runs probes as launches (`check`). The top floor.
May import ``model/``, ``tools/``, ``node_programs/``, ``hosts/``, ``launch/``, ``providers/`` and ``lifecycle/``.
"""
