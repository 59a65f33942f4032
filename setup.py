"""The package's metadata, requirements and entry points are in setup.cfg. This file adds what setup.cfg cannot
say: the top-level model_cards/ folder (the model card templates train.py renders) ships inside the wheel as
pooled_models/model_cards, so a pip-installed pooled-train renders cards from the same files as a checkout."""

from setuptools import find_packages, setup

CARDS_PACKAGE = "pooled_models.model_cards"

setup(
    packages=[*find_packages(include=["pooled_models", "pooled_models.*"]), CARDS_PACKAGE],
    package_dir={CARDS_PACKAGE: "model_cards"},
    package_data={CARDS_PACKAGE: ["*.md"]},
)
