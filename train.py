#!/usr/bin/env python
"""Fine-tune any Transformers backbone with any pooling head.

    python train.py configs/quickstart.yaml
    python train.py --model_name_or_path bert-base-uncased --pooling attention \
        --train_file train.csv --validation_file dev.csv --output_dir out --do_train --do_eval
    accelerate launch --multi_gpu --num_processes 2 train.py configs/quickstart.yaml

Run ``python train.py --help`` for every setting; the README's "Training with train.py" explains them.
"""

import sys

from pooled_models.train.cli import main

if __name__ == "__main__":
    sys.exit(main())
