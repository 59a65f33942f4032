"""The training room: train.py's CLI over Trainer (``python -m pooled_models.train``, ``pooled-train``). Imports the
model room, never the reverse; needs the ``[train]`` extra. Importing this package imports nothing else."""
