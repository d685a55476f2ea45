"""The target table as a PNG: one horizontal bar per metric (its ratio), the target as a
line on the bar, green when met, red when not, grey when invalid."""

from __future__ import annotations

from pathlib import Path

from .targets import Outcome


def draw(outcomes: list[Outcome], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(outcomes)
    fig, ax = plt.subplots(figsize=(11, 0.55 * n + 1.6))
    top = max([o.target.target for o in outcomes] + [o.ratio or 0 for o in outcomes]) * 1.15
    for i, o in enumerate(outcomes):
        y = n - 1 - i
        ratio = o.ratio or 0.0
        color = {"met": "#2e7d32", "not met": "#c62828"}.get(o.verdict, "#9e9e9e")
        ax.barh(y, ratio, color=color, height=0.6)
        ax.plot([o.target.target] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2)
        label = f"{o.ratio:.2f}" if o.ratio is not None else "not measured"
        if o.verdict == "invalid":
            label += " (invalid)"
        ax.text(ratio + top * 0.01, y, label, va="center", fontsize=9)
    ax.set_yticks(range(n))
    ax.set_yticklabels([o.target.label() for o in reversed(outcomes)], fontsize=9)
    ax.set_xlim(0, top)
    ax.set_xlabel("ratio (bar) against its target (black line); green met, red not met")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
