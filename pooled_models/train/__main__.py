"""``python -m pooled_models.train``: the training CLI (also the ``pooled-train`` command and the root train.py)."""

import sys

from .cli import main

sys.exit(main())
