#!/bin/sh
# abidiff against the committed baseline (the zlib-ng pattern). Exit 0: no ABI change.
# Usage: abicheck.sh [--refresh] LIBKESTREL_SO INCLUDE_DIR BASELINE.abi [SUPPRESSIONS]
#        abicheck.sh --expect-break LIBKESTREL_SO INCLUDE_DIR BASELINE.abi
#   --refresh        rewrite the baseline from the library (release commits only)
#   --expect-break   succeed only if abidiff reports an incompatible change (proves the check bites)
set -eu
mode=check
case "${1:-}" in --refresh) mode=refresh; shift ;; --expect-break) mode=break; shift ;; esac
SO=$1
INC=$2
BASE=$3
SUPP=${4:-$(dirname "$0")/kestrel.abignore}
GEN=$(dirname "$SO")/../include
cur=$(mktemp --suffix=.abi)
trap 'rm -f "$cur"' EXIT
abidw --headers-dir "$INC" --headers-dir "$GEN" --drop-private-types --no-show-locs "$SO" > "$cur"
if [ $mode = refresh ]; then
  cp "$cur" "$BASE"
  echo "abicheck: baseline $BASE refreshed"
  exit 0
fi
set +e
abidiff --suppressions "$SUPP" "$BASE" "$cur" > "$cur.report" 2>&1
rc=$?
set -e
if [ $mode = break ]; then
  cat "$cur.report"; rm -f "$cur.report"
  # bit 3 (8) = ABIDIFF_ABI_INCOMPATIBLE_CHANGE
  if [ $((rc & 8)) -ne 0 ]; then echo "abicheck: the removal was caught (abidiff exit $rc)"; exit 0; fi
  echo "abicheck: a removed function was NOT reported as incompatible (abidiff exit $rc)"; exit 1
fi
cat "$cur.report"
# additions alone (exit 4, nothing removed or changed) keep the promise: new symbols in a new node
if [ $rc -eq 4 ] && grep -q "^Functions changes summary: 0 Removed, 0 Changed" "$cur.report" &&
   grep -q "^Variables changes summary: 0 Removed, 0 Changed" "$cur.report"; then
  rm -f "$cur.report"
  echo "abicheck: only additions against $BASE (compatible)"
  exit 0
fi
rm -f "$cur.report"
if [ $rc -ne 0 ]; then
  echo "abicheck: ABI differs from $BASE (abidiff exit $rc). If intended, bump the version node and run 'make abi-baseline'."
  exit 1
fi
echo "abicheck: no ABI change against $BASE"
