"""``python -m pooled_models.sweep``: the pooling sweep (also the ``pooled-sweep`` command and the root sweep.py)."""

import sys

from .runner import main

sys.exit(main())
