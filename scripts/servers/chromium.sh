#!/usr/bin/env bash
# Debian's Chromium for the web console's browser test (tests/e2e/test_console_browser.py, driven
# by Playwright with executable_path=/usr/bin/chromium; Playwright never downloads a browser).
# Not a server: `prepare` installs the package, `up`/`status` report it, `down` has nothing to stop.
NAME=chromium
source "$(dirname "$0")/_lib.sh"
CHROMIUM=/usr/bin/chromium

do_prepare() { [ -x "$CHROMIUM" ] || apt_ensure chromium; }

do_up() {
    do_prepare
    [ -x "$CHROMIUM" ] || die 3 "no $CHROMIUM after installing chromium"
    echo "chromium up $CHROMIUM (a browser, no server)"
}

do_down() { echo "chromium down (nothing to stop)"; }

do_status() {
    if [ -x "$CHROMIUM" ]; then echo "chromium up $CHROMIUM"; else echo "chromium down"; return 1; fi
}

dispatch "$@"
