"""A labelled heatmap of the cosine similarities of a few texts, readable up to about 50 of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["save_similarity_heatmap", "short_label", "MAX_TEXTS"]

# Beyond this many texts the labels no longer fit a readable figure.
MAX_TEXTS = 50
LABEL_CHARACTERS = 40
# Up to this many texts each cell shows its value.
ANNOTATED_UP_TO = 16


def short_label(index: int, text: str, width: int = LABEL_CHARACTERS) -> str:
    """``"3: the text, cut to width…"``, on one line."""
    flat = " ".join(text.split()) or "(empty)"
    if len(flat) > width:
        flat = flat[: width - 1].rstrip() + "…"
    return f"{index}: {flat}"


def save_similarity_heatmap(
    similarities, texts: list[str], path: str | Path, title: str = "Cosine similarity"
) -> None:
    """Write a PNG of the ``[n, n]`` similarity matrix (a numpy array or a tensor, as ``model.similarity`` gives),
    rows labelled with the numbered texts, columns with their numbers; at most ``MAX_TEXTS`` texts."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    count = len(texts)
    if count > MAX_TEXTS:
        raise ValueError(f"A heatmap of {count} texts is unreadable; pass at most {MAX_TEXTS}.")
    similarities = np.asarray(similarities, dtype=np.float64)
    if similarities.shape != (count, count):
        raise ValueError(
            f"similarities must be [{count}, {count}] for {count} texts, got {list(similarities.shape)}."
        )
    labels = [short_label(index, text) for index, text in enumerate(texts)]
    side = 2.5 + 0.28 * count  # inches of matrix; the labels take their own room (tight bounding box)
    figure, axes = plt.subplots(figsize=(side + 1.5, side))
    # Cosine similarities lie in [-1, 1]; sentence embeddings rarely go below 0, so the scale starts at the lowest
    # value shown when that is above -1, which spreads the colours over the values that occur.
    low = min(0.0, float(similarities.min()))
    # Every text is identical to itself: the diagonal's 1.0 would take the top of the scale and squeeze the values
    # that matter (often below 0.5 between different texts) into a few dark colours. The scale ends at the largest
    # value between different texts instead, and the colour bar's arrow says that the diagonal lies beyond it.
    off_diagonal = similarities[~np.eye(count, dtype=bool)]
    high = float(off_diagonal.max()) if off_diagonal.size else 1.0
    high = 1.0 if high >= 1.0 or high <= low else high
    image = axes.imshow(similarities, cmap="viridis", vmin=low, vmax=high)
    axes.set_xticks(range(count), labels=[str(index) for index in range(count)], fontsize=8)
    axes.set_yticks(range(count), labels=labels, fontsize=8)
    axes.set_xlabel("text (by number)")
    axes.set_title(title, fontsize=10)
    if count <= ANNOTATED_UP_TO:
        for row in range(count):
            for column in range(count):
                value = float(similarities[row, column])
                colour = "black" if value > low + 0.6 * (high - low) else "white"
                axes.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    figure.colorbar(
        image,
        ax=axes,
        fraction=0.046,
        pad=0.04,
        label="cosine similarity",
        extend="max" if high < 1.0 else "neither",
    )
    figure.savefig(path, format="png", dpi=120, bbox_inches="tight")
    plt.close(figure)
