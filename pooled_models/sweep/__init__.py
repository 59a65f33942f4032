"""The sweep room: one model per pooling plus baselines, and a report (``python -m pooled_models.sweep``,
``pooled-sweep``). A client of the training room; needs the ``[sweep]`` extra."""
