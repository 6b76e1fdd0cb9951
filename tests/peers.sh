# The Python that runs the peers (PyTorch, ONNX Runtime, onnx, numpy: the project's .venv, pinned in
# scripts/python-requirements.txt) and what a test does when one is missing: sourced, not run.
#
# PY: $PARE_PYTHON (ctest sets it to the Python whose PyTorch pare was built against), else the
# project's .venv, else python3.
# need PEER_DESCRIPTION CHECK...: runs CHECK; if it fails, the peer is missing. Under `make test` and
# CI (PARE_REQUIRE_PEERS=1 or CI=true) the test then fails naming it; a developer's partial run
# skips (exit 77), saying so.
# need_python MODULES: need "$PY with MODULES" "$PY" -c "import MODULES".
_peers_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n "${PARE_PYTHON:-}" ]]; then PY=$PARE_PYTHON
elif [[ -x "$_peers_root/.venv/bin/python" ]]; then PY=$_peers_root/.venv/bin/python
else PY=python3
fi

peers_required() { [[ "${PARE_REQUIRE_PEERS:-0}" == 1 || "${CI:-}" == true ]]; }

need() {
  local what=$1
  shift
  "$@" >/dev/null 2>&1 && return 0
  if peers_required; then
    echo "FAIL: missing peer: $what (scripts/install-deps installs every peer; under make test and CI a missing peer fails the test)"
    exit 1
  fi
  echo "SKIP: missing peer: $what (scripts/install-deps installs it)"
  exit 77
}

need_python() { need "$PY with $1" "$PY" -c "import $1"; }
