#!/usr/bin/env bash
# Fresh-machine check: clone the repository into an empty directory and follow the README's
# two commands exactly, as a learner would on a new machine:
#
#   ./run lab    must install everything, build the npu runtime and serve JupyterLab (we wait
#                for it, then stop it)
#   ./run test   must install nothing more and pass the tests
#
# Usage: tools/fresh_machine_check.sh [repository (default: this one)] [pytest arguments...]
# With pytest arguments, the inner `./run test` runs only those tests: the test suite calls this
# script with a smoke selection, because the suite itself (the outer run) already ran everything.
set -euo pipefail
src="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
shift || true
work="$(mktemp -d)"
trap 'kill "${lab_pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
git clone -q "$src" "$work/npu-lab"
cd "$work/npu-lab"
test ! -e .venv || { echo "fresh-machine check: the clone already has a .venv" >&2; exit 1; }

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
start=$SECONDS
./run lab --no-browser --port="$port" --ServerApp.token=fresh-check > lab.log 2>&1 &
lab_pid=$!
for _ in $(seq 1 900); do
  if curl -sf "http://127.0.0.1:$port/api/status?token=fresh-check" > /dev/null; then break; fi
  if ! kill -0 "$lab_pid" 2>/dev/null; then echo "fresh-machine check: ./run lab exited" >&2; tail -20 lab.log >&2; exit 1; fi
  sleep 1
done
# The server may answer /api/status a moment before it serves the page: ask a few times, and on
# failure say what came back (HTTP status, first bytes) beside the server's log.
served=0
for _ in $(seq 1 30); do
  code="$(curl -sL -o lab.html -w '%{http_code}' "http://127.0.0.1:$port/lab?token=fresh-check" || true)"
  if [ "$code" = 200 ] && grep -q "JupyterLab" lab.html; then served=1; break; fi
  sleep 1
done
if [ "$served" != 1 ]; then
  echo "fresh-machine check: JupyterLab did not serve its page (last HTTP status: ${code:-none})" >&2
  head -c 300 lab.html >&2 2>/dev/null || true
  tail -20 lab.log >&2
  exit 1
fi
echo "fresh-machine check: ./run lab served JupyterLab after $((SECONDS - start)) s"
kill "$lab_pid"; wait "$lab_pid" 2>/dev/null || true

start=$SECONDS
# The inner run's notebooks run on this machine's own CPU code paths (the outer run varies them).
NPU_LAB_FRESH_CHECK=1 NPU_LAB_TEST_WORKERS=0 NPU_LAB_NOTEBOOK_CPU=plain ./run test "$@"
echo "fresh-machine check: ./run test${*:+ $*} passed in $((SECONDS - start)) s"
echo "fresh-machine check: OK"
