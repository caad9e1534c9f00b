#!/bin/sh
# Export check: every dynamic symbol of libkestrel is kestrel_*, versioned in lib/kestrel.map,
# and every KESTREL_API declaration of the headers is exported.
# Usage: exportcheck.sh LIBKESTREL_SO SOURCE_DIR
set -eu
SO=$1
SRC=$2
fail=0
exported=$(nm -D --defined-only "$SO" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u)
bad=$(echo "$exported" | grep -v '^kestrel_' || true)
if [ -n "$bad" ]; then
  echo "exportcheck: symbols outside the kestrel_ prefix are exported:"; echo "$bad"; fail=1
fi
unversioned=$(nm -D --defined-only "$SO" | awk '$2 != "A" && $3 !~ /@@KESTREL_/ { print $3 }')
if [ -n "$unversioned" ]; then
  echo "exportcheck: exported without a KESTREL_ version node:"; echo "$unversioned"; fail=1
fi
declared=$("$SRC/scripts/gen-map.sh")
for s in $declared; do
  echo "$exported" | grep -qx "$s" || { echo "exportcheck: declared KESTREL_API but not exported: $s"; fail=1; }
  grep -q "^[[:space:]]*$s;" "$SRC/lib/kestrel.map" || { echo "exportcheck: $s is missing from lib/kestrel.map"; fail=1; }
done
for s in $exported; do
  echo "$declared" | grep -qx "$s" || { echo "exportcheck: exported but not declared in a header: $s"; fail=1; }
done
[ $fail = 0 ] && echo "exportcheck: $(echo "$exported" | wc -l) symbols, all kestrel_, versioned and declared"
exit $fail
