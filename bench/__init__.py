"""asv benchmarks for harmony-ref, grouped by subject as numpy's suite is (bench_<subject>.py,
seeded shared inputs in common.py). Run with `asv run` (see asv.conf.json).

`asv run --python=same` benchmarks whatever `harmony_ref` the current interpreter imports; when
none is installed (a plain checkout), fall back to the checkout this bench/ directory sits in.
In a virtualenv run asv installs the commit under test, and that installed copy wins.
"""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("harmony_ref") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
