"""Run a bundled job only as far as its argument parser, without importing torch (standard library
only: ``python torchless.py SCRIPT ARGS...``, with ``DDPCTL_PARSE_ONLY=1``).

``run`` checks a bundled job's arguments with the job's own parser before anything starts
(``jobs.check_bundled_args``). The scripts import torch first, as the tutorials do, and a torch
import costs 1.5-3 s of CPU: more than the whole check. Here every ``torch``/``torchvision`` module
the script imports is a stand-in that takes any use (attributes, calls, decorators, subclassing),
so the script's module level runs as far as ``parse_config``, which exits after parsing. Anything
the stand-ins cannot take ends the check with another exit code than argparse's 2, which the check
ignores (the nodes parse the arguments again): a stand-in can skip the check, never refuse a run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import pathlib
import runpy
import sys
import types

STOOD_IN = ("torch", "torchvision")


class _Any:
    """Takes any use: an attribute, a call, a decorator (returns the function), a base class."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # @torch.no_grad(), @record
        return _Any()

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()

    def __mro_entries__(self, bases):
        return (object,)  # class Net(nn.Module)


class _Module(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any()


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in STOOD_IN:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def main() -> None:
    script, sys.argv = sys.argv[1], sys.argv[1:]
    sys.meta_path.insert(0, _StandIns())
    sys.path.insert(0, str(pathlib.Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
