"""The model room: the files copied next to every saved checkpoint, so that ``trust_remote_code=True`` loads it
where pooled_models is not installed. They import only the standard library, torch, transformers and each other
(``from .sibling import ...``); ``tests/modeling/test_layering.py`` enforces it."""
