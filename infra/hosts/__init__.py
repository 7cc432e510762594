"""Reaching nodes: hosts from an Ansible inventory, what OpenSSH makes of a host, strict SSH
connections (with the parallel reachability check), Ansible plays and the shared configure step
(site.yml, then the nodes as the play reported them). May import ``model/``, ``tools/`` and ``node_programs/``.
"""
