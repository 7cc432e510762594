"""ddpctl's benchmarks: run each as a module from the repository's root (``python -m bench.startup``),
so that they import ``tests.support`` as the tests do. What each measures is in its docstring; the
figures are in README.md (Benchmarks) and their history in bench/RESULTS.md."""
