"""What a reader checks in a matplotlib figure, read from its artists (not its pixels): each legend
entry names something drawn in the entry's colour and style."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.lines import Line2D
from matplotlib.patches import Patch


def _style(artist) -> tuple:
    """(kind, colour, line style, marker) as a legend shows it; patches by their face colour."""
    if isinstance(artist, Line2D):
        return ("line", to_rgba(artist.get_color(), artist.get_alpha()), artist.get_linestyle(),
                artist.get_marker() if artist.get_marker() not in ("", None) else "None")
    if isinstance(artist, Patch):
        return ("patch", to_rgba(artist.get_facecolor()), None, None)
    return (type(artist).__name__, None, None, None)


def _has_data(artist) -> bool:
    if isinstance(artist, Line2D):
        x, y = (np.asarray(v, dtype=float) for v in artist.get_data())
        return bool(len(x)) and not (np.isnan(x).all() or np.isnan(y).all())
    return True


def legend_entries(fig) -> list[tuple[str, tuple]]:
    """Every (label, style) in the figure's legends, per axes and figure-wide."""
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [(text.get_text(), _style(handle)) for legend in legends
            for handle, text in zip(legend.legend_handles, legend.get_texts())]


def drawn(fig) -> dict[str, list]:
    """label -> the labelled artists with data, over every axes (what the legend may name)."""
    out: dict[str, list] = {}
    for ax in fig.axes:
        for artist in [*ax.lines, *ax.patches, *ax.collections]:
            label = artist.get_label()
            if label and not label.startswith("_") and _has_data(artist):
                out.setdefault(label, []).append(artist)
    return out


def unmatched_legend_entries(fig) -> list[str]:
    """Legend entries with no drawn artist of that label in the entry's colour and line style."""
    artists = drawn(fig)
    return [label for label, style in legend_entries(fig)
            if not any(_style(a) == style for a in artists.get(label, []))]
