#!/bin/sh
# Install into a temporary prefix, then build the C and C++ examples against it twice
# (pkg-config, and find_package(kestrel 1)) and run them against the installed kestreld.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -eu
BUILD=$1
SRC=$2
T=$(mktemp -d /tmp/kestrel-install-XXXXXX)
chmod 711 "$T"   # jobs run as unprivileged accounts when this runs as root: they pass through to the data dir
trap 'kill $KPID 2>/dev/null || true; rm -rf "$T"' EXIT
KPID=
P="$T/prefix"
cmake --install "$BUILD" --prefix "$P" >/dev/null
for f in include/kestrel.h include/kestrel/version.h include/kestrel/job.h lib/libkestrel.so.1 lib/libkestrel.a \
         lib/pkgconfig/kestrel.pc lib/cmake/kestrel/kestrelConfig.cmake bin/kestrel bin/kestreld; do
  [ -e "$P/$f" ] || { echo "install: $f is missing"; exit 1; }
done
[ "$(readlink "$P/lib/libkestrel.so")" = libkestrel.so.1 ] || { echo "install: libkestrel.so -> $(readlink "$P/lib/libkestrel.so")"; exit 1; }

export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cc -std=c99 -Wall -Werror "$SRC/examples/c/list_jobs.c" $(pkg-config --cflags --libs kestrel) -o "$T/c_pc"
c++ -std=c++17 -Wall -Werror "$SRC/examples/cpp/submit.cpp" $(pkg-config --cflags --libs kestrel) -o "$T/cpp_pc"
cmake -S "$SRC/examples" -B "$T/ex" -DCMAKE_PREFIX_PATH="$P" >/dev/null
cmake --build "$T/ex" >/dev/null
# the static archive, with its dependencies as shared libraries
cc -std=c99 "$SRC/examples/c/list_jobs.c" -DKESTREL_STATIC $(pkg-config --cflags kestrel) "$P/lib/libkestrel.a" \
   $(pkg-config --libs libcurl libcjson libprotobuf-c libcrypto) -lpthread -ldl -o "$T/c_static"

"$P/bin/kestreld" --port 0 --port-file "$T/port" --data-dir "$T/data" 2>"$T/kestreld.log" &
KPID=$!
i=0
while [ ! -s "$T/port" ]; do i=$((i+1)); [ $i -lt 200 ] || { cat "$T/kestreld.log"; exit 1; }; sleep 0.05; done
export KESTREL_URL="http://127.0.0.1:$(cat "$T/port")" KESTREL_TOKEN="$(cat "$T/data/admin.token")"
export LD_LIBRARY_PATH="$P/lib"
for exe in "$T/c_pc" "$T/cpp_pc" "$T/ex/list_jobs" "$T/ex/submit" "$T/c_static"; do
  echo "== $exe"
  "$exe"
done
"$P/bin/kestrel" jobs
kill -TERM $KPID
wait $KPID
echo "install: examples built by pkg-config and find_package, and ran against the installed kestreld"
