"""`python -m harmony_ref` is the same as the `harmony-ref` console script."""

import sys

from harmony_ref.cli import main

sys.exit(main())
