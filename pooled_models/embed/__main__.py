"""``python -m pooled_models.embed``: embed texts, show how similar they are (also the ``pooled-embed`` command)."""

import sys

from .cli import main

sys.exit(main())
