"""Compare poolings on your data: one model per pooling, plus two baselines, and a report.

    python sweep.py configs/quickstart.yaml --poolings mean,cls,attention --seeds 1 2 3 --report_dir report

See pooled_models/sweep.py and the README ("Which pooling for my data?").
"""

import sys

from pooled_models.sweep.runner import main

if __name__ == "__main__":
    sys.exit(main())
