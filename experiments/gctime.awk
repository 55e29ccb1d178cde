# GC time in the GCCDF paper's four stages (Fig. 14), summed over a run's
# GC rounds per approach: mark, analysis (GCCDF's ownership table), reading
# the involved containers, writing the new ones; with the total, the bytes
# GC read and wrote, and the containers it produced. Usage:
# awk -F, -f gctime.awk results.csv
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
$col["kind"] == "gc" {
    a = $col["approach"]
    if (!(a in seen)) { seen[a] = 1; order[++n] = a }
    rounds[a]++
    mark[a] += $col["mark_seconds"]; an[a] += $col["analyze_seconds"]
    rd[a] += $col["sweep_read_seconds"]; wr[a] += $col["sweep_write_seconds"]
    tot[a] += $col["total_seconds"]
    br[a] += $col["bytes_read"]; bw[a] += $col["bytes_written"]
    prod[a] += $col["produced_containers"]
}
END {
    print "| approach | GC rounds | mark s | analysis s | read containers s | write containers s | total s | MiB read | MiB written | produced |"
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (j = 1; j <= n; j++) {
        a = order[j]
        printf "| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %d |\n", a, rounds[a], \
            mark[a], an[a], rd[a], wr[a], tot[a], br[a] / 1048576, bw[a] / 1048576, prod[a]
    }
}
