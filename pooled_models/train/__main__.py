"""``python -m pooled_models.train``: the training CLI (also the ``pooled-train`` command and the root train.py)."""

import sys

from .run import main

sys.exit(main())
