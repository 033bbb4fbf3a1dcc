"""OLMo-core's mixture computation for the same files and ratios, the reference for
SourceMixture.CountsAreOlmoCoresForTheSameFilesAndRatios (tests/data/source_mixture_test.cpp).

usage: olmo_core_mixture.py CASES.json
CASES: a list of {"sources": [{source_name, target_ratio, paths, max_repetition_ratio,
max_source_fraction}], "requested_tokens": N, "global_batch_tokens": N, "sequence_length": N};
the files are uint16 token files. Prints per case a line "case K", then one line per path
occurrence of the mixture, "source path tokens", or one line "error MESSAGE" when OLMo-core
refuses the mixture. OLMo-core comes from
tests/support/olmo_core_import.py's folder.
"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from olmo_core_import import olmo_core

source_mixture, exceptions = olmo_core("olmo_core_mixture", "olmo_core.data.source_mixture", "olmo_core.exceptions")

def run(spec):
    sources = [
        source_mixture.SourceMixtureConfig(
            source_name=s["source_name"],
            target_ratio=s["target_ratio"],
            paths=s["paths"],
            max_repetition_ratio=s.get("max_repetition_ratio", 1.0),
            max_source_fraction=s.get("max_source_fraction", 1.0),
        )
        for s in spec["sources"]
    ]
    config = source_mixture.SourceMixtureDatasetConfig(
        source_list=source_mixture.SourceMixtureList(sources=sources),
        requested_tokens=spec["requested_tokens"],
        global_batch_size=spec["global_batch_tokens"],
        render_tables=False,
        quiet=True,
    )
    try:
        mixture = config.build(npdtype=np.uint16, sequence_length=spec["sequence_length"])
    except exceptions.OLMoConfigurationError as e:
        print("error", e)
        return
    for outcome in mixture.sources:
        for item in outcome.path_tokens:
            print(outcome.name, item.path, item.tokens)


for k, spec in enumerate(json.loads(Path(sys.argv[1]).read_text())):
    print("case", k)
    run(spec)
