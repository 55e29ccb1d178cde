#!/bin/sh
# Former script, now `tessera lab reproduce [--quick] [--out DIR] [--no-run]` (see docs/LAB.md).
exec "${TESSERA:-$(dirname "$0")/../target/release/tessera}" lab reproduce --root "$(dirname "$0")/.." "$@"
