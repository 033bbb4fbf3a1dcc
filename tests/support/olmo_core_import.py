"""OLMo-core for the reference scripts of tests/: it lives in $SIAMESE_OLMO_CORE, else
~/.cache/siamese/olmo-core, where scripts/setup.sh installs scripts/requirements-olmo-core.txt.

A script does `sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))`, then
`modules = olmo_core("its name", "olmo_core.x", ...)`. A module that does not import ends the
script with the folder and the fix: a skip would hide a broken install.
"""
import importlib
import os
import sys

OLMO_CORE_DIR = os.environ.get("SIAMESE_OLMO_CORE") or os.path.expanduser("~/.cache/siamese/olmo-core")


def olmo_core(script, *names):
    """The modules `names` imported from OLMo-core's folder, in order."""
    sys.path.insert(0, OLMO_CORE_DIR)
    try:
        return [importlib.import_module(name) for name in names]
    except ImportError as e:
        sys.exit(f"{script}: OLMo-core does not import from {OLMO_CORE_DIR}: {e}\n"
                 "fix: run scripts/setup.sh (it installs scripts/requirements-olmo-core.txt there)")
