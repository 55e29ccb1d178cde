# GC's share of the layout, per approach, from one lab results.csv: GC rounds;
# containers involved, reclaimed and produced (sums over the rounds); the live
# share of what GC read (bytes copied forward / bytes of reclaimed containers
# read); containers GC produced over the data containers at the end; mean
# read amplification of the retained backups restored at the end.
# GCCDF can only lay out what GC copies: this table bounds its gain.
# Usage: awk -F, -f gcsummary.awk results.csv
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
{
    a = $col["approach"]
    if (!(a in seen)) { seen[a] = 1; order[++n] = a }
    if ($col["data_containers"] != "") last[a] = $col["data_containers"]
    if ($col["kind"] == "gc") {
        rounds[a]++
        inv[a] += $col["involved_containers"]
        rec[a] += $col["reclaimed_containers"]
        prod[a] += $col["produced_containers"]
        br[a] += $col["bytes_read"]
        bw[a] += $col["bytes_written"]
    }
    if ($col["kind"] == "restore" && $col["when"] == "final") {
        ra[a] += $col["read_amplification"]; rn[a]++
    }
}
END {
    print "| approach | GC rounds | involved | reclaimed | produced | live share of reclaimed | produced / data containers at the end | RA retained (mean) |"
    print "|---|---|---|---|---|---|---|---|"
    for (j = 1; j <= n; j++) {
        a = order[j]
        if (!rounds[a]) continue
        printf "| %s | %d | %d | %d | %d | %s | %s | %s |\n", a, rounds[a], inv[a], rec[a], prod[a], \
            (br[a] ? sprintf("%.0f %%", 100 * bw[a] / br[a]) : "–"), \
            (last[a] ? sprintf("%.0f %% (%d)", 100 * prod[a] / last[a], last[a]) : "–"), \
            (rn[a] ? sprintf("%.3f", ra[a] / rn[a]) : "–")
    }
}
