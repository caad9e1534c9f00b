#!/bin/sh
# Print the KESTREL_API function names declared in the public headers (one a line).
cd "$(dirname "$0")/.." && grep -ho 'KESTREL_API[^;]*' include/kestrel/*.h include/kestrel/version.h.in |
  grep -o 'kestrel_[a-z0-9_]*[[:space:]]*(' | tr -d '( ' | sort -u
