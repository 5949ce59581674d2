#!/usr/bin/env bash
# Install headless Chromium and its WebDriver, which the timeline tests load the HTML page in.
#
# Debian's packages (chromium, chromium-driver: /usr/bin/chromium, /usr/bin/chromedriver),
# never a browser build downloaded by a test tool: Debian's registry is the one this project's
# machines reach, and the two packages are built together, so the driver always matches
# the browser.
#
# Usage: tests/install-chromium.sh        Idempotent: does nothing when both are installed.
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "chromium and chromedriver already installed: $(chromium --version 2>/dev/null | head -1)"
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-chromium.sh: no apt-get here; install Chromium and a matching chromedriver," \
         "and put both on PATH as chromium and chromedriver" >&2
    exit 1
fi
sudo=""
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { echo "install-chromium.sh: needs root (or sudo) for apt-get" >&2; exit 1; }
    sudo=sudo
fi
echo "installing Debian's chromium and chromium-driver (once; takes a minute or two)..."
export DEBIAN_FRONTEND=noninteractive
# Another apt-get may hold the lock on a shared machine: wait for it rather than fail.
$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
$sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
echo "installed: $(chromium --version 2>/dev/null | head -1), $(chromedriver --version 2>/dev/null | head -1)"
