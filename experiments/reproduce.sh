#!/bin/sh
# Regenerate docs/REPRODUCTION.md: run the committed experiments (unless
# --no-run) into experiments/results/NAME (report.html with the plots,
# results.csv), then fill the tables of experiments/REPRODUCTION.md.in from
# the CSVs (experiments/summarize.awk).
#
#   experiments/reproduce.sh            # run everything, then write the doc
#   experiments/reproduce.sh --no-run   # only rewrite the doc from the CSVs
#   TESSERA=path/to/tessera experiments/reproduce.sh
#
# redis-series, redis-interleave-series, mix-redis-nginx, smr-redis
# (experiments/real-series-gen.sh), git-series, git-git-series,
# git-git-interleave-series and gccdf-synth5-50g need their datasets first (see their .toml files);
# without them they are skipped and their tables kept from the CSVs.
#
# Directives in the .in file: `@TABLE NAME` (summarize.awk: dedup, RA, GC
# produced per approach), `@GCTABLE NAME` (gcsummary.awk: GC's share of the
# layout), `@ROUNDS NAME APPROACH…` (rounds.awk: RA of the newest backup
# round by round), `@GCTIME NAME` (gctime.awk: GC time in the GCCDF
# paper's four stages), `@SMRTABLE NAME` (smrsummary.awk: the SMR paper's
# dedup ratio and speed factor per approach).
set -eu
cd "$(dirname "$0")/.."
TESSERA=${TESSERA:-target/release/tessera}
EXPERIMENTS="fgc-random-90 fgc-random-80 fgc-random-70 pgc-fastcopy gccdf-synth5 gccdf-interleave-synth5 rewrite-synth5 vc-synth5 git-series redis-series redis-interleave-series mix-redis-nginx gccdf-fig15-mix mfdedup-mix smr-redis smr-redis-segment smr-redis-c64k smr-redis-c256k smr-redis-data mfdedup-redis gc-time-redis git-git-series git-git-interleave-series gccdf-synth5-50g"
if [ "${1:-}" != "--no-run" ]; then
    for e in $EXPERIMENTS; do
        case $e in
        redis-series | redis-interleave-series | smr-redis | smr-redis-segment | smr-redis-c64k | smr-redis-c256k | mfdedup-redis) ds=/tmp/series/redis ;;
        mix-redis-nginx | gccdf-fig15-mix | mfdedup-mix) ds=/tmp/series/mix ;;
        gc-time-redis | smr-redis-data) ds=/tmp/series/redis-tar ;;
        git-git-series | git-git-interleave-series) ds=/tmp/series-git/traces ;;
        gccdf-synth5-50g) ds=/tmp/series-mix/traces ;;
        *) ds= ;;
        esac
        if [ -n "$ds" ] && [ ! -d "$ds" ]; then
            echo "skipping $e: no dataset at $ds (see its .toml)" >&2
            continue
        fi
        if [ "$e" = git-series ] && [ ! -d experiments/data/tessera-series ]; then
            echo "skipping $e: no dataset at experiments/data/tessera-series (see its .toml)" >&2
            continue
        fi
        "$TESSERA" lab run "experiments/$e.toml" --out "experiments/results/$e"
        # Keep what a reader needs: the report and the per-step CSV, gzipped.
        gzip -9f "experiments/results/$e/results.csv"
        rm -rf "experiments/results/$e/results.jsonl" "experiments/results/$e/work"
    done
fi
out=docs/REPRODUCTION.md
tmp=$out.tmp
: > "$tmp"
while IFS= read -r line; do
    case $line in
    @TABLE\ * | @GCTABLE\ * | @ROUNDS\ * | @SMRTABLE\ * | @GCTIME\ *)
        set -- $line
        directive=$1
        e=$2
        shift 2
        csv=experiments/results/$e/results.csv
        # Committed results keep the per-step CSV gzipped.
        rows() { if [ -f "$csv.gz" ]; then gzip -dc "$csv.gz"; else cat "$csv"; fi; }
        if [ ! -f "$csv" ] && [ ! -f "$csv.gz" ]; then
            echo "(not run yet: experiments/results/$e)" >> "$tmp"
        elif [ "$directive" = @TABLE ]; then
            rows | awk -F, -f experiments/summarize.awk >> "$tmp"
        elif [ "$directive" = @GCTIME ]; then
            rows | awk -F, -f experiments/gctime.awk >> "$tmp"
        elif [ "$directive" = @SMRTABLE ]; then
            rows | awk -F, -f experiments/smrsummary.awk >> "$tmp"
        elif [ "$directive" = @GCTABLE ]; then
            rows | awk -F, -f experiments/gcsummary.awk >> "$tmp"
        else
            rows | awk -F, -v approaches="$*" -f experiments/rounds.awk >> "$tmp"
        fi
        ;;
    *) printf '%s\n' "$line" >> "$tmp" ;;
    esac
done < experiments/REPRODUCTION.md.in
mv "$tmp" "$out"
echo "wrote $out"
