#!/bin/sh
# Install what building and testing Kestrel needs on Debian: apt packages, then a
# Python venv (keras, torch 2.13.0 CPU, cffi, pytest, tqdm, nbclient + ipykernel for the notebook test). Idempotent: installs only what is missing.
# Usage: scripts/deps.sh VENV_DIR
set -eu
VENV=${1:-.venv}
PKGS="build-essential libcurl4-openssl-dev libcjson-dev libprotobuf-c-dev protobuf-c-compiler libmicrohttpd-dev
libsqlite3-dev libssl-dev libpcre2-dev libcmocka-dev libyaml-dev abigail-tools pkg-config cmake git curl python3 python3-venv valgrind wrk
prometheus chromium chromium-driver zsh man-db time strace"

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# npm fetches the console's chart library at build time: any npm will do (NodeSource's nodejs ships
# one; Debian's is the package npm)
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing Debian packages:$missing (run as root, or: sudo apt-get install$missing)" >&2
    exit 1
  fi
  echo "deps: installing$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# Debian's interpreter, not one under /root: jobs run under unprivileged Unix accounts (kestreld
# as root gives each user's jobs their own), and they must be able to run the venv's python.
PY=/usr/bin/python3
if [ -f "$VENV/pyvenv.cfg" ] && ! grep -q '^home = /usr/bin$' "$VENV/pyvenv.cfg"; then
  echo "deps: $VENV was made from another Python than $PY (job accounts could not run it): making it again"
  rm -rf "$VENV"
fi
if ! KERAS_BACKEND=torch "$VENV/bin/python" -c 'import keras, torch, cffi, pytest, tqdm, nbclient, nbformat, ipykernel, selenium, pandas, mypy, jax' 2>/dev/null; then
  echo "deps: filling the Python venv $VENV (keras, torch==2.13.0, cffi, pytest, tqdm, nbclient, ipykernel, selenium, pandas, mypy, jax)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.13.0 keras cffi pytest tqdm nbclient nbformat ipykernel selenium pandas mypy jax 2>&1 |
    grep -v "^WARNING: Location" || true
  KERAS_BACKEND=torch "$VENV/bin/python" -c 'import keras, torch, cffi, pytest, tqdm, nbclient, nbformat, ipykernel, selenium, pandas, mypy, jax' || { echo "deps: the venv is incomplete" >&2; exit 1; }
fi
