"""The package's layers, bottom first: the one list tests/test_layers.py checks every import
against and tools/docs_architecture.py writes the architecture page's package map from.

Each entry is (layer, top-level names under harmony_ref/ it holds); a module may import its own
layer and the layers below it. A new package is one entry here (the test fails on a package in
no layer, the page's test on a package missing from the page).
"""

from __future__ import annotations

LAYERS = [
    (
        "shared",
        ("__init__", "_io", "_toml", "_schema", "_format", "_threads", "_cpus", "units", "metrics"),
    ),
    ("quant", ("quant",)),
    ("kernels", ("kernels",)),
    ("model", ("model",)),
    ("config", ("config",)),
    ("checkpoint", ("checkpoint",)),
    ("runtime", ("runtime",)),
    ("compress", ("compress",)),  # runs the decoder to calibrate: above runtime/
    ("eval", ("eval",)),
    ("device", ("device",)),
    ("lab", ("lab",)),  # the device-session stack: above device/, below backends/ that drive it
    ("backends", ("backends",)),
    ("calibrate", ("calibrate",)),
    ("track", ("track",)),
    ("job", ("job",)),  # the main job: above track/ (its records), below sweep/ (runs it)
    ("sweep", ("sweep",)),
    ("commands", ("commands",)),
    ("cli", ("cli", "__main__")),
]
