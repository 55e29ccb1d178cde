# Read amplification round by round, from one lab results.csv: for each
# approach, the mean read amplification of the backups restored right after
# they were made (newest), grouped by the GC rounds run before them, and the
# containers the round before produced. Shows where GC starts to matter.
# Usage: awk -F, -v approaches="naive gccdf" -f rounds.awk results.csv
NR == 1 {
    for (i = 1; i <= NF; i++) col[$i] = i
    na = split(approaches, ap, " ")
    for (k = 1; k <= na; k++) want[ap[k]] = k
    next
}
{
    a = $col["approach"]
    if (!(a in want)) next
    if ($col["kind"] == "gc") { r[a]++; prod[a, r[a]] = $col["produced_containers"]; if (r[a] > maxr) maxr = r[a] }
    if ($col["kind"] == "restore" && $col["when"] == "newest") { s[a, r[a] + 0] += $col["read_amplification"]; c[a, r[a] + 0]++ }
}
END {
    h = "| GC rounds before |"; u = "|---|"
    for (k = 1; k <= na; k++) { h = h " " ap[k] " RA newest | " ap[k] " produced |"; u = u "---|---|" }
    print h; print u
    for (i = 0; i <= maxr; i++) {
        line = "| " i " |"
        for (k = 1; k <= na; k++) {
            a = ap[k]
            line = line sprintf(" %s | %s |", (c[a, i] ? sprintf("%.3f", s[a, i] / c[a, i]) : "–"), (i ? prod[a, i] : "–"))
        }
        print line
    }
}
