"""The pods bench's timeline as a PNG: worker replicas over time above the queue and progress."""

from __future__ import annotations

from pathlib import Path

from bench.pods.stats import Timeline


def plot(timeline: Timeline, path: Path, title: str) -> Path:
    """Two panels sharing the time axis: replicas desired/ready, then backlog and linked PDFs."""
    import matplotlib

    matplotlib.use("Agg")  # no display here; set before pyplot is imported
    import matplotlib.pyplot as plt

    t = [p.t_s for p in timeline.points]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5), height_ratios=[1, 1.3])
    top.step(t, [p.desired for p in timeline.points], where="post", label="desired (operator)")
    top.step(t, [p.ready for p in timeline.points], where="post", label="ready", linestyle="--")
    top.set_ylabel("worker replicas")
    top.set_ylim(bottom=0)
    top.yaxis.get_major_locator().set_params(integer=True)
    bottom.plot(t, [p.linked for p in timeline.points], label="linked PDFs", color="tab:green")
    queue = bottom.twinx()
    queue.plot(t, [p.queue for p in timeline.points], label="backlog (jobs)", color="tab:red")
    queue.set_ylabel("backlog (jobs)")
    queue.set_ylim(bottom=0)
    bottom.set_ylabel("linked PDFs")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("seconds since the upload started")
    for ax in (top, bottom):
        for at, what in ((timeline.uploaded_s, "uploaded"), (timeline.completed_s, "COMPLETED")):
            if at is not None:
                ax.axvline(at, color="grey", linewidth=0.8, linestyle=":")
                if ax is top:
                    ax.annotate(what, (at, 0), xytext=(3, 3), textcoords="offset points")
    top.legend(loc="upper right")
    lines = bottom.get_legend_handles_labels()
    more = queue.get_legend_handles_labels()
    bottom.legend(lines[0] + more[0], lines[1] + more[1], loc="center right")
    top.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
