"""The model: what ddpctl knows, as typed values, and the state home that keeps it: cluster and
run specs, cluster state and its resources' records, the locks of the state home, errors, progress
callbacks, costs, the supported torch versions, a host, a run's result, the autodown setting. May
import nothing of ddpctl outside this package: every other floor builds on it.
"""
