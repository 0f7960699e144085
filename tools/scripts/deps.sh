#!/usr/bin/env bash
# Installs the Debian packages weft builds and tests with (when missing). Run as root or with
# sudo available; does nothing when everything is already installed.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libyaml-dev libjansson-dev libmicrohttpd-dev
      libcurl4-openssl-dev libxxhash-dev libssl-dev libpcre2-dev libcmocka-dev
      clang libclang-rt-14-dev valgrind python3 python3-venv curl patchelf)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "weft deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
