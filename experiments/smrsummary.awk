# Summarize an SMR-method run (no deletion; each backup restored right
# after it is made): per approach the dedup ratio of all versions
# (logical / stored, and the SMR paper's "removed duplicate bytes / all
# bytes"), the mean speed factor (MB restored per container read) of the
# newest-backup restores over all versions and over the last 20, the bytes
# rewritten, and the backup throughput. Usage: awk -F, -f smrsummary.awk results.csv
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
{
    a = $col["approach"]
    if (!(a in seen)) { seen[a] = 1; order[++n] = a }
    if ($col["kind"] == "backup") {
        dedup[a] = $col["classic_dedup_ratio"]
        rw[a] += $col["rewritten_bytes"]
        logical[a] += $col["logical_bytes"]
        secs[a] += $col["seconds"]
    }
    if ($col["kind"] == "restore" && $col["when"] == "newest") {
        k = ++cnt[a]; sf[a, k] = $col["speed_factor"]
    }
}
END {
    print "| approach | dedup ratio (logical/stored) | dedup (removed/all) | speed factor, mean | speed factor, last 20 | rewritten MiB | backup MB/s |"
    print "|---|---|---|---|---|---|---|"
    for (j = 1; j <= n; j++) {
        a = order[j]; m = cnt[a]; s = 0; l = 0; lc = 0
        for (k = 1; k <= m; k++) { s += sf[a, k]; if (k > m - 20) { l += sf[a, k]; lc++ } }
        printf "| %s | %.3f | %.3f | %s | %s | %.1f | %.0f |\n", a, dedup[a], \
            (dedup[a] > 0 ? 1 - 1 / dedup[a] : 0), \
            (m ? sprintf("%.4f", s / m) : "–"), (lc ? sprintf("%.4f", l / lc) : "–"), \
            rw[a] / 1048576, (secs[a] > 0 ? logical[a] / secs[a] / 1e6 : 0)
    }
}
