# Summarize one lab results.csv per approach, as a Markdown table:
# final actual dedup ratio; mean read amplification of the restores made
# right after each backup (newest); of the retained backups restored at the
# end (final), and of the older and newer half of them; GC containers
# produced. Usage: awk -F, -f summarize.awk results.csv
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
{
    a = $col["approach"]
    if (!(a in seen)) { seen[a] = 1; order[++n] = a }
    if ($col["dedup_ratio"] != "") dedup[a] = $col["dedup_ratio"]
    if ($col["kind"] == "gc") produced[a] += $col["produced_containers"]
    if ($col["kind"] == "restore") {
        ra = $col["read_amplification"]
        if ($col["when"] == "newest") { nsum[a] += ra; ncnt[a]++ }
        if ($col["when"] == "final") {
            k = ++fcnt[a]; fra[a, k] = ra; fid[a, k] = $col["backup_id"] + 0
        }
    }
}
END {
    print "| approach | actual dedup ratio | RA newest (mean) | RA retained (mean) | RA older half | RA newer half | GC produced |"
    print "|---|---|---|---|---|---|---|"
    for (j = 1; j <= n; j++) {
        a = order[j]; m = fcnt[a]
        # Final restores are in backup order: halves by position.
        s = 0; so = 0; sn = 0; h = int(m / 2)
        for (k = 1; k <= m; k++) { s += fra[a, k]; if (k <= h) so += fra[a, k]; else sn += fra[a, k] }
        printf "| %s | %.3f | %s | %s | %s | %s | %d |\n", a, dedup[a], \
            (ncnt[a] ? sprintf("%.3f", nsum[a] / ncnt[a]) : "–"), \
            (m ? sprintf("%.3f", s / m) : "–"), (h ? sprintf("%.3f", so / h) : "–"), \
            (m - h ? sprintf("%.3f", sn / (m - h)) : "–"), produced[a]
    }
}
