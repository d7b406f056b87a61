"""Undoes torch 2.10's fix of pytorch/pytorch#161889 in any Python started with the folder holding
this file on PYTHONPATH: SAC's two dispatch modes answer `ignore_compile_internals() -> False`
again, as on 2.5-2.9, so a machine that has only a fixed torch shows what an affected torch runs.
Put that folder on PYTHONPATH before the command that runs the repro, and every Python it starts
loads this file first.

Nothing is imported here: the modes are patched when torch.utils.checkpoint is first imported,
so a process that never imports torch (the script's parent, nsys, pip) is left as it was.
"""
import importlib.abc
import importlib.machinery
import sys

TARGET = "torch.utils.checkpoint"


def revert(module):
    for mode in (module._CachingTorchDispatchMode, module._CachedTorchDispatchMode):
        mode.ignore_compile_internals = classmethod(lambda cls: False)


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        revert(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if TARGET in sys.modules:
    revert(sys.modules[TARGET])
else:
    sys.meta_path.insert(0, _Finder())
