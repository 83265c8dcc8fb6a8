"""The long steps of a model build report their progress (runtime/progress.py) to whoever
listens: the generated calibration windows one by one, the Gram pass and GPTQ block by block,
each ending at done == total; nothing is heard outside `reporting`."""

import numpy as np

from harmony_ref.compress import compress
from harmony_ref.compress import observe as cal
from harmony_ref.quant.policy import policy_from_dict
from harmony_ref.runtime.llama import Llama
from harmony_ref.runtime.progress import report, reporting
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights


def _steps(heard):
    out: dict = {}
    for step, done, total in heard:
        out.setdefault(step, []).append((done, total))
    return out


def test_a_generated_repair_reports_its_windows_and_gram_pass():
    w = tiny_weights(tiny_config("llama"), seed=4)
    pol = policy_from_dict(
        {
            "name": "p",
            "default": "fp32",
            "prune": {
                "ffn": 0.5,
                "repair": True,
                "calibration": "generated",
                "samples": 3,
                "sample_tokens": 8,
            },
        },
        "<p>",
    )
    heard = []
    cal._GENERATED.clear()
    with reporting(lambda *a: heard.append(a)):
        Llama(compress(w, pol, np.arange(100, 140)), pol)
    steps = _steps(heard)
    assert steps["generating calibration windows"] == [(1, 3), (2, 3), (3, 3)]
    gram = steps["Gram pass over the calibration windows (blocks)"]
    assert gram == [(i + 1, w.config.n_layers) for i in range(w.config.n_layers)]
    report("after", 1, 1)  # no listener left
    assert heard[-1][0] != "after"


def test_gptq_reports_block_by_block():
    w = tiny_weights(tiny_config("llama"), seed=5)
    pol = policy_from_dict(
        {"name": "g", "default": "int4-g32", "quantize": {"method": "gptq", "samples": 2}}, "<g>"
    )
    heard = []
    with reporting(lambda *a: heard.append(a)):
        Llama(compress(w, pol, np.arange(3, 300)), pol)
    n = w.config.n_layers
    assert _steps(heard)["GPTQ / AWQ on the calibration windows (blocks)"] == [
        (i + 1, n) for i in range(n)
    ]
