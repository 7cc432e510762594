"""A cluster's lifecycle through its provider: which cluster a command means, `up` with the
provider's failure policy, `configure` again, `down`. May import ``model/``, ``tools/``,
``node_programs/``, ``hosts/``, ``launch/`` and ``providers/``.
"""
