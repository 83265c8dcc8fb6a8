"""harmony-ref: a hardware-in-the-loop benchmarking and regression harness for quantized
on-device LLM inference on phones (HarmonyOS-class and Android SoCs, INT4/INT8 and GGUF weights).

The folders read as the data flow: each imports only from its own layer and the layers below it.
The order is one list, tools/layers.py LAYERS (tests/test_layers.py checks every import against
it); docs/explanations/architecture.md shows every package and module in that order, written
from the list and the docstrings by tools/docs_architecture.py.
"""

__version__ = "0.1.0"
