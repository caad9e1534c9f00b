#!/bin/sh
# Real-GPU check: compare libkestrel's inventory with nvidia-smi, then run a child with the
# selector's CUDA_VISIBLE_DEVICES and confirm CUDA shows it exactly the chosen device.
# Where there is no GPU it says "skipped" and exits 77 (ctest reports it as skipped, not passed).
# Usage: tests/gpu/check.sh BUILD_DIR
set -eu
BUILD=${1:-build}
KESTREL="$BUILD/cli/kestrel"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu check: skipped (no NVIDIA GPU or driver on this machine)"
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cc -O2 "$(dirname "$0")/cuda_probe.c" -ldl -o "$T/cuda_probe"

echo "== nvidia-smi"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,compute_cap --format=csv,noheader | tee "$T/smi"
echo "== kestrel devices --all"
"$KESTREL" devices --all | tee "$T/kestrel"
fail=0
while IFS=, read -r idx uuid name bus mem cc; do
  uuid=$(echo "$uuid" | tr -d ' ')
  bus=$(echo "$bus" | tr -d ' ' | tr 'A-F' 'a-f' | sed 's/^0000//')
  if ! grep -q "$uuid" "$T/kestrel"; then echo "MISSING: $uuid"; fail=1; continue; fi
  line=$(grep "$uuid" "$T/kestrel")
  echo "$line" | grep -qi "$bus" || { echo "BUS MISMATCH for $uuid: $bus"; fail=1; }
  cc=$(echo "$cc" | tr -d ' ')
  echo "$line" | grep -q " $cc " || { echo "CC MISMATCH for $uuid: $cc"; fail=1; }
done < "$T/smi"

echo "== kestrel devices --select 1"
"$KESTREL" devices --select 1 | tee "$T/select"
cvd=$(sed -n 's/^CUDA_VISIBLE_DEVICES=\([^ ]*\) .*/\1/p' "$T/select")
seen=$(CUDA_VISIBLE_DEVICES="$cvd" CUDA_DEVICE_ORDER=PCI_BUS_ID "$T/cuda_probe")
echo "chosen: $cvd"
echo "the child sees: $seen"
[ "$seen" = "$cvd" ] || { echo "MISMATCH: the child does not see exactly the chosen device"; fail=1; }
[ $fail = 0 ] && echo "gpu check: passed"
exit $fail
