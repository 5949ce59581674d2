#!/usr/bin/env bash
# Print the path of a CPython X.Y interpreter installed on this machine, or fail saying where it looked.
#
# `make test` runs the unit suite on every CPython swarmlog supports (pyproject's classifiers), each
# in a venv of its own (.venv-3.12, ...) made from the interpreter found here: pyenv's versions
# (newest patch release first), then pythonX.Y on PATH, then the usual system places. A pyenv shim
# that is on PATH but not activated fails to run and is passed over.
#
# Usage: tests/find-python.sh 3.12
set -euo pipefail

want="${1:?usage: find-python.sh X.Y}"
root="${PYENV_ROOT:-}"
if [[ -z "$root" ]] && command -v pyenv >/dev/null; then
    root="$(pyenv root)"
fi
root="${root:-$HOME/.pyenv}"

candidates=()
while IFS= read -r found; do
    candidates+=("$found")
done < <(ls -d "$root/versions/$want".*/bin/python 2>/dev/null | sort -rV || true)
on_path="$(command -v "python$want" 2>/dev/null || true)"
[[ -n "$on_path" ]] && candidates+=("$on_path")
candidates+=("/usr/local/bin/python$want" "/usr/bin/python$want")

check="import platform, sys; sys.exit(platform.python_implementation() != 'CPython' or '%d.%d' % sys.version_info[:2] != '$want')"
for candidate in "${candidates[@]}"; do
    if [[ -x "$candidate" ]] && "$candidate" -c "$check" 2>/dev/null; then
        echo "$candidate"
        exit 0
    fi
done
{
    echo "find-python.sh: no CPython $want on this machine; swarmlog is tested on it (make test)."
    echo "  looked in: $root/versions/$want.*/bin/python, python$want on PATH, /usr/local/bin, /usr/bin"
    echo "  install it (pyenv install $want, or the distribution's python$want and python$want-venv) and run make test again"
} >&2
exit 1
