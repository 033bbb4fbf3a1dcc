#!/usr/bin/env bash
# Lints the clone's shell scripts with shellcheck (every *.sh and every file whose first line
# is a sh/bash shebang: scripts/torchrun, .ci/run) and its Python files with the pinned ruff
# (scripts/requirements.txt; rules in ruff.toml). Checks tracked files plus new ones git does
# not ignore. scripts/setup.sh installs both tools; scripts/test.sh runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

shell_files=()
python_files=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  case $f in
    *.sh) shell_files+=("$f") ;;
    *.py) python_files+=("$f") ;;
    *) head -n 1 "$f" | grep -Eq '^#!.*[/ ](ba)?sh( |$)' && shell_files+=("$f") ;;
  esac
done < <(git ls-files -z --cached --others --exclude-standard -- '*.sh' '*.py' 'scripts/*' '.ci/*')

status=0
command -v shellcheck >/dev/null || {
  echo "lint: shellcheck not found (apt-get install shellcheck; scripts/setup.sh does)" >&2
  exit 1
}
# -x follows `source`d files (.shellcheckrc says where the scripts' source= paths start).
if shellcheck -x "${shell_files[@]}"; then
  echo "lint: shellcheck passed on ${#shell_files[@]} shell scripts"
else
  echo "lint: shellcheck failed (see above)" >&2
  status=1
fi

# shellcheck source=python_env.sh
source scripts/python_env.sh
if ! "$SIAMESE_PYTHON" -m ruff --version >/dev/null 2>&1; then
  echo "lint: $SIAMESE_PYTHON has no ruff (scripts/setup.sh installs scripts/requirements.txt)" >&2
  exit 1
fi
if "$SIAMESE_PYTHON" -m ruff check --quiet "${python_files[@]}"; then
  echo "lint: ruff passed on ${#python_files[@]} Python files"
else
  echo "lint: ruff failed (see above; many fixes: $SIAMESE_PYTHON -m ruff check --fix FILE)" >&2
  status=1
fi
exit "$status"
