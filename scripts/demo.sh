#!/bin/sh
# make demo: start kestreld on 127.0.0.1 with a data dir under the build tree, submit the
# Keras example, follow its logs to the end, print the final state, push the trained model to the
# repository and pull it back, stop the daemon.
# Usage: scripts/demo.sh BUILD_DIR PYTHON
set -eu
BUILD=$(cd "${1:-build}" && pwd)
PY=${2:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA="$BUILD/demo-data"
KESTRELD="$BUILD/server/kestreld"
KESTREL="$BUILD/cli/kestrel"

rm -rf "$DATA"
mkdir -p "$DATA"
"$KESTRELD" --listen 127.0.0.1 --port 0 --data-dir "$DATA" --port-file "$DATA/port" --grace-period 10 \
  2>"$DATA/kestreld.log" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT INT TERM
i=0
while [ ! -s "$DATA/port" ] || [ ! -s "$DATA/admin.token" ]; do
  i=$((i + 1))
  if [ $i -gt 200 ] || ! kill -0 $PID 2>/dev/null; then
    echo "demo: kestreld did not start:" >&2
    cat "$DATA/kestreld.log" >&2
    exit 1
  fi
  sleep 0.05
done
export KESTREL_URL="http://127.0.0.1:$(cat "$DATA/port")"
export KESTREL_TOKEN="$(cat "$DATA/admin.token")"
echo "demo: kestreld is up at $KESTREL_URL (data in $DATA)"
"$KESTREL" version

ID=$("$KESTREL" -o json submit --name mnist-like --label demo=keras --env KERAS_BACKEND=torch \
      -- "$PY" "$ROOT/examples/keras/train_mnist_like.py" --epochs 3 | sed -n 's/^[[:space:]]*"id":[[:space:]]*"\([0-9]*\)".*/\1/p')
echo "demo: submitted job $ID; following its logs"
"$KESTREL" logs -f "$ID"
echo
"$KESTREL" status "$ID"
echo
echo "demo: metrics the job reported:"
curl -s -H "Authorization: Bearer $KESTREL_TOKEN" "$KESTREL_URL/api/v1/jobs/$ID/metrics?name=val_accuracy"
echo
"$KESTREL" wait "$ID"

# the trained model into the repository, and back
MODEL=$(find "$DATA" -name model.keras -path "*$ID*" | head -n 1)
if [ -n "$MODEL" ]; then
  echo
  echo "demo: pushing the trained model to the repository"
  "$KESTREL" push demo/mnist "$MODEL" --alias production --meta job="$ID" --meta framework=keras
  "$KESTREL" models demo/mnist
  "$KESTREL" pull demo/mnist@production "$DATA/pulled.keras" >/dev/null
  echo "demo: pulled demo/mnist@production: $(sha256sum < "$DATA/pulled.keras" | cut -c1-16)... (pushed $(sha256sum < "$MODEL" | cut -c1-16)...)"
fi
