#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with network), before deploy/gpu-check.sh on
# a GPU machine that has none: downloads the Debian packages sao builds
# against that such a machine lacks (CAF, cpp-httplib, PCRE2, utf8proc,
# websocketpp, asio, nlohmann_json, doctest, OpenSSL, pkgconf) into
# .gpu-deps/, which travels with the tree. gpu-check.sh unpacks them into a
# private prefix (never into /). Idempotent: present files are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
cd .gpu-deps
packages=(
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 zlib1g-dev
  libssl-dev libssl3 libutf8proc-dev libutf8proc2 libxxhash-dev libxxhash0
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  doctest-dev nlohmann-json3-dev libwebsocketpp-dev libasio-dev
  pkgconf pkgconf-bin libpkgconf3
)
missing=()
for package in "${packages[@]}"; do
  ls "${package}"_*.deb >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then apt-get download "${missing[@]}"; fi
echo "gpu-deps: ${#packages[@]} packages in $(pwd) ($(du -sh . | cut -f1))"
