"""Bench scripts, loaded by path for their unit tests: bench/ is not a package."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench_module(relative: str, name: str) -> ModuleType:
    """bench/`relative` as module `name` (kept in sys.modules, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
