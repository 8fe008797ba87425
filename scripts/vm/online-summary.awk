# The summary of a CPU hotplug trace (the cpuhp tracepoints), printed by
# the guest's init (scripts/vm/init.sh) after it brought CPUs online with
# vm-run.sh --trace-online. Input: the trace, as ftrace prints it
#
#   <idle>-0 [002] d..1.  1.234567: cpuhp_enter: cpu: 0002 target: 233 step:   1 (smpboot_prepare)
#   <idle>-0 [002] d..1.  1.234890: cpuhp_exit:  cpu: 0002  state:   1 step:   1 ret: 0
#
# and -v lost=N, the events the trace buffers lost. Output, on
# "herd-vm: online: trace: " lines: how many CPUs were traced, the mean
# time from a CPU's first hotplug event to its last for the first and the
# last CPUs brought online (32 each, or half of them below 64), then per
# state, costliest first (12 of them), its callback's time summed over
# every CPU and its mean per CPU among the first and among the last: a
# state whose cost grows with the CPUs online shows a last mean above its
# first. Runs under busybox awk in the guest (and mawk, gawk: tested by
# herd/tests/vm_script.rs).
{
    ev = ""
    for (i = 2; i <= NF; i++)
        if ($i ~ /^cpuhp_(enter|multi_enter|exit):$/) { ev = $i; ts = $(i - 1); break }
    if (ev == "") next
    sub(/:$/, "", ts)
    cpu = ""; step = ""
    # cpu: 0064 is decimal (busybox awk reads a leading 0 as octal).
    for (j = i + 1; j < NF; j++) {
        v = $(j + 1); sub(/^0+/, "", v)
        if ($j == "cpu:") cpu = v + 0
        if ($j == "step:") step = v + 0
    }
    if (!(cpu in order)) { order[cpu] = ++ncpu; first_ts[cpu] = ts }
    last_ts[cpu] = ts
    k = cpu SUBSEP step
    if (ev == "cpuhp_exit:") {
        if (!(k in start)) next
        d = ts - start[k]; f = fn[k]; delete start[k]
        total[f] += d
        rank[f, order[cpu]] += d
        seen[f] = 1
    } else {
        start[k] = ts
        f = $NF; gsub(/[()]/, "", f); fn[k] = f
    }
}
END {
    m = ncpu < 64 ? int(ncpu / 2) : 32
    if (m < 1) { print "herd-vm: online: trace: no hotplug events traced"; exit }
    span1 = 0; span2 = 0
    for (c in order) {
        if (order[c] <= m) span1 += last_ts[c] - first_ts[c]
        if (order[c] > ncpu - m) span2 += last_ts[c] - first_ts[c]
    }
    printf "herd-vm: online: trace: %d CPUs traced (%d events lost); first hotplug event to last per CPU: %.0f ms for the first %d, %.0f ms for the last %d\n", ncpu, lost, span1 / m * 1000, m, span2 / m * 1000, m
    for (shown = 0; shown < 12; shown++) {
        best = ""
        for (f in seen) if (best == "" || total[f] > total[best]) best = f
        if (best == "") break
        a = 0; b = 0
        for (r = 1; r <= m; r++) { a += rank[best, r]; b += rank[best, ncpu - m + r] }
        printf "herd-vm: online: trace: %-36s %8.2f s in all, %7.1f ms per CPU first, %7.1f ms last\n", best, total[best], a / m * 1000, b / m * 1000
        delete seen[best]
    }
}
