"""The console scripts: each execs the tool installed inside the package, so the tool
finds the shim and the simulated device relative to itself."""

import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _exec(tool):
    path = os.path.join(_BIN, tool)
    if not os.access(path, os.X_OK):
        sys.exit("gpumem: {} is missing from this installation".format(path))
    os.execv(path, [path] + sys.argv[1:])


def run():
    _exec("gpumem-run")


def report():
    _exec("gpumem-report")


def replay():
    _exec("gpumem-replay")
