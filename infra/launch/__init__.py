"""Launchers: a pure planner (cluster + run spec -> per-node argv and env) and the executors that
carry a plan out (locally here; over SSH and through sbatch in their own modules). May import
``model/``, ``tools/``, ``node_programs/`` and ``hosts/``."""
