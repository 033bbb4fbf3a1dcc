"""What the plot scripts share (imported from beside them): axes of plot_runs.py and
plot_analysis.py, and the --out folder of all three."""
import os


def make_out_folder(parser, out):
    """Creates the folder --out names (parents too), so a fresh path works as given; one that
    cannot be created is a usage error naming it rather than a traceback."""
    folder = os.path.dirname(out)
    try:
        os.makedirs(folder or ".", exist_ok=True)
    except OSError as e:
        parser.error(f"--out {out}: cannot create the folder {folder} ({e.strerror}); choose another --out")


def log_axes(ax, xlabel, ylabel, title, legend_columns=1):
    """A log-scale y axis with labels, a grid on both scales, a small legend and a title."""
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=legend_columns)
    ax.set_title(title)
