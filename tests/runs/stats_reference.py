"""scipy's Student t for tests/runs/stats_test.cpp: reads a JSON of quantile cases and samples,
writes the quantiles and the 95% intervals scipy gives for them."""

import json
import sys

import numpy as np
from scipy import stats


def main(cases_path: str, out_path: str) -> None:
    with open(cases_path) as f:
        cases = json.load(f)
    quantiles = [float(stats.t.ppf(p, df)) for p, df in cases["quantiles"]]
    intervals = []
    for sample in cases["samples"]:
        x = np.asarray(sample, dtype=np.float64)
        low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        intervals.append([float(low), float(high)])
    with open(out_path, "w") as f:
        json.dump({"quantiles": quantiles, "intervals": intervals}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
