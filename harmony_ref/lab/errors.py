"""The one error of a measurement that did not happen: `BackendError`. Defined here, below the
backends, because the session stack (lab/process.py, transport.py, session.py) raises it as well
as every backend (backends/base.py)."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A measurement did not happen (timeout, crash, unparseable output): nothing is recorded.
    Its message is one line; `detail` holds what does not fit there (the script sent, the last
    lines of stderr), printed under `--verbose`."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail
