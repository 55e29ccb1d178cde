#!/bin/sh
# Render a lab report with headless Chromium, to look at it as a reader
# would: a full-height PNG (window WIDTH wide, HEIGHT tall) and, when
# ImageMagick's `convert` is there, tiles of 1000 px height to view one by one.
#
#   experiments/screenshot.sh REPORT.html [OUTDIR] [WIDTH] [HEIGHT]
#
# Needs `chromium` (Debian: apt-get install chromium). Opens the file
# offline: a report that fetched anything would render without it.
set -eu
html=$(realpath "$1")
out=${2:-screenshots}
width=${3:-1280}
height=${4:-9000}
mkdir -p "$out"
name=$(basename "$(dirname "$html")")-$(basename "$html" .html)-$width
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size="$width,$height" --screenshot="$out/$name.png" "file://$html" 2>/dev/null
im=
for c in magick convert /usr/bin/convert; do
    if "$c" -version 2>/dev/null | grep -q '^Version: ImageMagick'; then im=$c; break; fi
done
if [ -n "$im" ]; then
    # Crop away the blank bottom, then cut into tiles.
    "$im" "$out/$name.png" -trim +repage -background white -gravity north -extent "${width}x" "$out/$name.png"
    "$im" "$out/$name.png" -crop "${width}x1000" +repage "$out/$name-%02d.png"
fi
ls "$out/$name"*
