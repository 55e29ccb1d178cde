#!/bin/sh
# The real version series of issue 30's experiments, traced as the GCCDF
# artifact chunks (fastcdc 1k/4k/32k, SHA-1). Not committed (GBs of traces).
#
#   experiments/real-series-gen.sh PATH-TO-redis.git PATH-TO-nginx.git [OUT]
#
# OUT (default /tmp/series) receives:
#   redis/  the 290 tags of Redis whose names start with a digit (1.3.6 …),
#           one trace per tag, in version order
#   nginx/  nginx's `release-*` tags (release-0.1.0 … release-1.31.4)
#   redis-tar/  (with KEEP_TARS=1) the Redis tarballs themselves, the
#           data-mode dataset of gc-time-redis.toml
#   mix/    a two-source series as the GCCDF paper's MIX (a second real
#           source interleaved with Redis): Redis tag k and nginx tag k
#           alternate as NNNNN-s0-vKKKK / NNNNN-s1-vKKKK (symbolic links),
#           so the lab keeps one chain per source; 290 versions each, the
#           nginx tags taken evenly over its history.
set -eu
redis=$1
nginx=$2
out=${3:-/tmp/series}
T=${TESSERA:-target/release/tessera}
mkdir -p "$out"
for s in redis nginx; do
    if [ -d "$out/$s" ] && { [ -z "${KEEP_TARS:-}" ] || [ -d "$out/$s-tar" ] || [ $s = nginx ]; }; then
        continue
    fi
    case $s in
    redis) repo=$redis tags='[0-9]*' ;;
    nginx) repo=$nginx tags='release-*' ;;
    esac
    "$T" lab gen git -q --repo "$repo" --tags "$tags" --out "$out/$s-tar"
    [ -d "$out/$s" ] || "$T" lab gen trace -q --chunker gccdf --hash sha1 --out "$out/$s" "$out/$s-tar"
    [ -n "${KEEP_TARS:-}" ] && [ $s = redis ] || rm -rf "$out/$s-tar"
done
rm -rf "$out/mix"
mkdir "$out/mix"
ls "$out/redis" | sort > "$out/.redis"
ls "$out/nginx" | sort > "$out/.nginx"
n=$(wc -l < "$out/.redis")
m=$(wc -l < "$out/.nginx")
k=0
while [ $k -lt "$n" ]; do
    r=$(sed -n "$((k + 1))p" "$out/.redis")
    g=$(sed -n "$((k * m / n + 1))p" "$out/.nginx")
    ln -s "../redis/$r" "$out/mix/$(printf '%05d-s0-v%04d' $((2 * k)) "$k")"
    ln -s "../nginx/$g" "$out/mix/$(printf '%05d-s1-v%04d' $((2 * k + 1)) "$k")"
    k=$((k + 1))
done
rm -f "$out/.redis" "$out/.nginx"
echo "$out: redis $n, nginx $m traces; mix $((2 * n)) versions"
