#!/usr/bin/env bash
# The official `openai` Python client (PyPI, in a cached virtualenv) against
# `ferrograd-serve --llm` on loopback: serve/tests/openai/check_openai_client.py over a
# random fixture model. Usage: .ci/openai_client.sh BIN_DIR (where ferrograd-serve and
# examples/llm_fixture are).
set -euo pipefail
bin="$1"
cache="${FERROGRAD_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrograd-ci}/openai-venv"
if ! "$cache/bin/python" -c "import openai" 2>/dev/null; then
    rm -rf "$cache"
    python3 -m venv "$cache"
    "$cache/bin/pip" install --quiet openai
fi
work="$(mktemp -d)"
"$bin/examples/llm_fixture" --out "$work/model" >/dev/null
# A free port, chosen by the system.
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$bin/ferrograd-serve" --llm "$work/model" --port "$port" >"$work/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
python3 - "$port" <<'PY'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/v1/models"
for _ in range(300):
    try:
        urllib.request.urlopen(url, timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.1)
sys.exit("the server did not come up")
PY
"$cache/bin/python" serve/tests/openai/check_openai_client.py "http://127.0.0.1:$port/v1"
