# shellcheck shell=bash
# Sourced by the scripts: sets SIAMESE_PYTHON to the Python whose torch the build uses.
# A python3 that already has torch 2.11 (the GPU machine's) is used as it is; otherwise the
# project's virtual environment outside the clone (SIAMESE_VENV, default
# ~/.cache/siamese/venv), so re-runs and CI on the same machine reuse the multi-GB install.
# With SIAMESE_INSTALL=1 the environment is created and the pinned packages installed.
# SIAMESE_OLMO_CORE (default ~/.cache/siamese/olmo-core) is the folder that holds OLMo-core,
# the reference of tests/export/olmo_core_parity.py, apart from the environment
# (scripts/requirements-olmo-core.txt); SIAMESE_INSTALL=1 installs it there too.
siamese_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIAMESE_VENV=${SIAMESE_VENV:-$HOME/.cache/siamese/venv}
SIAMESE_OLMO_CORE=${SIAMESE_OLMO_CORE:-$HOME/.cache/siamese/olmo-core}
siamese_torch_pin=$(sed -n 's/^torch==//p' "$siamese_root/scripts/requirements.txt")

siamese_has_torch() {  # python: true when its torch is the pinned version
  "$1" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$siamese_torch_pin')" \
    2>/dev/null
}

if [ -z "${SIAMESE_PYTHON:-}" ]; then
  if [ ! -x "$SIAMESE_VENV/bin/python" ] && siamese_has_torch python3; then
    SIAMESE_PYTHON=$(command -v python3)
  else
    SIAMESE_PYTHON=$SIAMESE_VENV/bin/python
  fi
fi
if [ "${SIAMESE_INSTALL:-0}" = 1 ] && [ "$SIAMESE_PYTHON" = "$SIAMESE_VENV/bin/python" ]; then
  if [ ! -x "$SIAMESE_PYTHON" ]; then
    echo "setup: creating the virtual environment $SIAMESE_VENV"
    python3 -m venv "$SIAMESE_VENV"
  fi
  # pip's own check is slow; a stamp of the requirements file makes a re-run instant.
  stamp="$SIAMESE_VENV/.siamese-requirements"
  if ! cmp -s "$siamese_root/scripts/requirements.txt" "$stamp"; then
    echo "setup: installing scripts/requirements.txt into $SIAMESE_VENV (torch with CUDA: several GB)"
    "$SIAMESE_VENV/bin/pip" install -q --disable-pip-version-check -r "$siamese_root/scripts/requirements.txt"
    cp "$siamese_root/scripts/requirements.txt" "$stamp"
  fi
  stamp="$SIAMESE_VENV/.siamese-requirements-nodeps"
  if ! cmp -s "$siamese_root/scripts/requirements-nodeps.txt" "$stamp"; then
    echo "setup: installing scripts/requirements-nodeps.txt into $SIAMESE_VENV"
    "$SIAMESE_VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
      -r "$siamese_root/scripts/requirements-nodeps.txt"
    cp "$siamese_root/scripts/requirements-nodeps.txt" "$stamp"
  fi
  # Without its dependencies: torch and the rest come from the environment (the file says which).
  stamp="$SIAMESE_OLMO_CORE/.siamese-requirements"
  if ! cmp -s "$siamese_root/scripts/requirements-olmo-core.txt" "$stamp"; then
    echo "setup: installing scripts/requirements-olmo-core.txt into $SIAMESE_OLMO_CORE"
    "$SIAMESE_VENV/bin/pip" install -q --disable-pip-version-check --no-deps --upgrade \
      --target "$SIAMESE_OLMO_CORE" -r "$siamese_root/scripts/requirements-olmo-core.txt"
    cp "$siamese_root/scripts/requirements-olmo-core.txt" "$stamp"
  fi
fi
export SIAMESE_PYTHON SIAMESE_OLMO_CORE
