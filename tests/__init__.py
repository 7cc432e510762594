"""ddpctl's test suite: a package so that its modules import helpers as ``tests.support.*``."""
