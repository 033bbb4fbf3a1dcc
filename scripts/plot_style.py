"""What every figure of plot_runs.py and plot_analysis.py shares (imported from beside them)."""


def log_axes(ax, xlabel, ylabel, title, legend_columns=1):
    """A log-scale y axis with labels, a grid on both scales, a small legend and a title."""
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=legend_columns)
    ax.set_title(title)
