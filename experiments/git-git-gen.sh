#!/bin/bash
# The dataset of git-git-series.toml: one `git archive` tarball per release
# tag of git (v[0-9]*, release candidates excluded), in version order
# (v:refname), named NNNNN-<tag> as `tessera lab gen git` names them, traced
# 25 at a time with the artifact's chunker and SHA-1; each batch's tarballs
# are deleted once traced, so the ~15 GB of tarballs never sit on disk.
#
#   experiments/git-git-gen.sh PATH-TO-git.git [OUT=/tmp/series-git]   (the committed results: OUT=/work/data/series-git)
set -eu
REPO=$1
OUT=${2:-/tmp/series-git}
TESSERA=${TESSERA:-target/release/tessera}
mkdir -p "$OUT/traces"
git -C "$REPO" tag --list --sort=v:refname 'v[0-9]*' | grep -v -- '-rc' > "$OUT/tags.txt"
i=0
b=0
trace_batch() {
    "$TESSERA" lab gen trace "$1" --out "$OUT/traces" --chunker gccdf --hash sha1
    rm -rf "$1"
}
while read -r tag; do
    bd=$OUT/batch$b
    mkdir -p "$bd"
    safe=$(printf '%s' "$tag" | tr -c 'A-Za-z0-9._-' '_')
    f=$(printf '%05d-%s' $i "$safe")
    if [ ! -f "$OUT/traces/$f.trace" ]; then
        git -C "$REPO" archive --format=tar -o "$bd/$f.tar" "refs/tags/$tag"
        stat -c '%s %n' "$bd/$f.tar" >> "$OUT/sizes.txt"
    fi
    i=$((i + 1))
    if [ $((i % 25)) -eq 0 ]; then
        trace_batch "$bd"
        b=$((b + 1))
    fi
done < "$OUT/tags.txt"
bd=$OUT/batch$b
if [ -d "$bd" ] && [ -n "$(ls "$bd")" ]; then trace_batch "$bd"; fi
rmdir "$bd" 2>/dev/null || true
echo "$i tags traced into $OUT/traces"
