#!/usr/bin/env bash
# Installs every Debian package sao needs to build, test and run. Idempotent:
# when everything is present it touches nothing (no network needed).
# libopenblas0-pthread matters: with Debian's default reference BLAS,
# LibTorch matmuls run 20-40x slower (check with `sao doctor`).
# `--tests` also installs what only the tests need (headless Chromium, which
# loads the dashboard against a live run; Node.js and npm for the tokenizer
# parity test; Debian's python3-torch for the model parity test's
# independent reference forward pass).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libopenblas0-pthread
  libcaf-dev libssl-dev openssl nlohmann-json3-dev doctest-dev
  libcpp-httplib-dev libcairo2-dev fonts-dejavu-core curl
  libpcre2-dev libutf8proc-dev libwebsocketpp-dev libasio-dev libxxhash-dev libgloo-dev
  python3
)
if [ "${1:-}" = "--tests" ]; then
  packages+=(chromium python3-torch)
  # The tokenizer parity test runs Hugging Face's JavaScript tokenizers (it
  # installs them from npm into the build tree). A Node.js from elsewhere
  # (NodeSource ships npm inside its nodejs package) is used as it is.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
