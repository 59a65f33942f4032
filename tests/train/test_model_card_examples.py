"""model_cards/examples/ stays what train.py renders today: every fixed line of each template (a line with no
Jinja in it: headings, table headers, sentences) is in one of the example cards rendered from it (a line under a
condition, such as the multi-label section, is in the cards of the runs it applies to). A template edited without
regenerating the examples (python scripts/render_example_cards.py) fails here."""

import re

import pytest
from helpers import REPO

from pooled_models.train.card import DEFAULT_TEMPLATE, TASK_TEMPLATE, TEMPLATES_DIR

EXAMPLES = REPO / "model_cards" / "examples"
TEMPLATE_OF = {
    "sequence": DEFAULT_TEMPLATE,
    "multi_label": DEFAULT_TEMPLATE,
    "token": TASK_TEMPLATE,
    "multitask": TASK_TEMPLATE,
    "zero_shot": DEFAULT_TEMPLATE,
}
JINJA = re.compile(r"\{[{%#]")


def fixed_lines(template: str) -> list[str]:
    return [line.strip() for line in template.splitlines() if line.strip() and not JINJA.search(line)]


def missing_fixed_lines(template: str, cards: list[str]) -> list[str]:
    lines = {line.strip() for card in cards for line in card.splitlines()}
    return [line for line in fixed_lines(template) if line not in lines]


def cards_of(template_path) -> list[str]:
    return [
        (EXAMPLES / f"{kind}.md").read_text(encoding="utf-8")
        for kind, path in TEMPLATE_OF.items()
        if path == template_path
    ]


def test_the_templates_are_the_top_level_model_cards_folder():
    assert TEMPLATES_DIR == REPO / "model_cards"
    assert DEFAULT_TEMPLATE.is_file() and TASK_TEMPLATE.is_file()


@pytest.mark.parametrize("template_path", [DEFAULT_TEMPLATE, TASK_TEMPLATE], ids=lambda path: path.name)
def test_the_example_cards_have_their_templates_fixed_lines(template_path):
    template = template_path.read_text(encoding="utf-8")
    assert len(fixed_lines(template)) >= 5
    assert missing_fixed_lines(template, cards_of(template_path)) == []


@pytest.mark.parametrize("kind", sorted(TEMPLATE_OF))
def test_each_example_card_is_a_packaged_minilm_run_with_no_temporary_path(kind):
    card = (EXAMPLES / f"{kind}.md").read_text(encoding="utf-8")
    assert "/tmp" not in card  # the run's temporary folder is replaced by outputs/<kind>
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in card
    assert f'"outputs/{kind}"' in card


def test_a_changed_template_line_is_seen():
    template = DEFAULT_TEMPLATE.read_text(encoding="utf-8")
    changed = template.replace("## Pooling", "## Pooling strategy")
    assert missing_fixed_lines(changed, cards_of(DEFAULT_TEMPLATE)) == ["## Pooling strategy"]


def test_the_examples_cover_single_label_multi_label_token_and_multitask_runs():
    cards = {kind: (EXAMPLES / f"{kind}.md").read_text(encoding="utf-8") for kind in TEMPLATE_OF}
    assert "single_label_classification" in cards["sequence"]
    assert "## Multi-label decisions" in cards["multi_label"]
    assert "| token |" in cards["token"] and "| sequence |" not in cards["token"]
    assert "| token |" in cards["multitask"] and "| sequence |" in cards["multitask"]
    assert "## Zero-shot evaluation" in cards["zero_shot"] and "| before training |" in cards["zero_shot"]
