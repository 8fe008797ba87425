# The qemu command line of scripts/vm-run.sh's guest: qemu_args turns the
# options parse_options resolved (scripts/vm/options.sh) into the guest
# kernel's command line and qemu's arguments. Sourced by vm-run.sh, and by
# herd/tests/vm_script.rs, which checks the arguments of each guest size
# directly (no qemu, kernel or initramfs needed).
# shellcheck shell=bash

# x86 CPU model and IOMMU of the q35 path; vm-run.sh's qemu probe checks
# that the qemu accepts exactly these (7.2: "eim=on requires accel=kvm").
q35_cpu=qemu64,x2apic=on
q35_iommu=intel-iommu,intremap=on,eim=on

# qemu_args: sets `append` (the guest kernel's command line) and `qemu`
# (the whole command: qemu_cmd, then the arguments). Reads the options'
# variables and: qemu_cmd (the binary and its data directories), kernel,
# initrd (paths), console and result (the files the two serial ports
# write), mhz (the host's TSC rate, for lpj= and tsc_early_khz=).
qemu_args() {
    local late_online smp cores core_ids half c n first last node_mb a
    local numa_args=() cpu_devices=() machine_args=()
    # quiet: the console carries herd's stderr, kernel errors only. The watchdogs
    # are off because the host's few CPUs run all vCPUs: a busy host easily
    # starves a vCPU for longer than the soft-lockup and RCU-stall thresholds.
    # lpj: every vCPU otherwise calibrates its delay loop at bring-up, which
    # fails under TCG and falls back to a slow loop (24 s of a 128-vCPU boot;
    # 5 s with lpj). tsc=reliable skips the TSC sync check per CPU. The value
    # assumes HZ=250 (Debian); the kernel's udelay uses the TSC anyway.
    append="console=ttyS0 quiet loglevel=3 panic=-1 nowatchdog nosoftlockup rcupdate.rcu_cpu_stall_suppress=1 tsc=reliable lpj=$((mhz * 4000)) mitigations=off"
    [ "$verbose" = 1 ] && append=${append/ quiet loglevel=3/ loglevel=7}
    # Fewer vCPUs at boot (--boot-cpus): the guest's init brings the others
    # online. Until fs_initcall the kernel's clocksource is jiffies, with which
    # no CPU can stop its tick, and under TCG every tick of every vCPU costs
    # host time (about 3% of a host CPU per idle vCPU here): 512 ticking vCPUs
    # leave nothing for the one bringing up the next. After boot an idle CPU
    # is tickless. What a CPU brought online after boot costs:
    # - nopat and no MTRRs in the CPU model (below): where the kernel keeps
    #   MTRRs or PAT in step, each CPU brought online after boot is a
    #   stop_machine over every online CPU (cache_ap_online), seconds each
    #   under TCG;
    # - no PIT or HPET (below): each update of the legacy timer interrupt
    #   (IRQ 0, which the HPET drives in legacy mode) loops over every vCPU
    #   in qemu's pic_irq_request, on qemu's main thread. Without them the
    #   kernel's timer check must be skipped (else: "IO-APIC + timer doesn't
    #   work"), and the kernel calibrates the TSC and the APIC timer against
    #   the ACPI PM timer instead, which under TCG put the TSC at 2358 MHz on
    #   this 2596 MHz host (a guest clock 10% fast): tsc_early_khz gives it
    #   the host's rate, which a TCG guest's TSC runs at.
    late_online=0
    if [ "$boot_cpus" -lt "$cpus" ]; then
        late_online=1
        append+=" maxcpus=$boot_cpus nopat no_timer_check tsc_early_khz=$((mhz * 1000))"
    fi
    for a in ${append_extra[@]+"${append_extra[@]}"}; do append+=" $a"; done

    # Topology: one socket per NUMA node, as on a multi-socket server, when the
    # vCPUs divide evenly. qemu numbers APIC ids by socket, core and thread
    # with a power of two of ids per socket, so on pc (ids 0-254) the split is
    # used only while the highest id fits.
    smp=$cpus
    if [ "$numa" -gt 1 ] && [ "$((cpus % numa))" = 0 ]; then
        cores=$((cpus / numa))
        core_ids=1
        while [ "$core_ids" -lt "$cores" ]; do core_ids=$((core_ids * 2)); done
        if [ "$machine" = q35 ] || [ $(((numa - 1) * core_ids + cores - 1)) -le 254 ]; then
            smp=$cpus,sockets=$numa,cores=$cores,threads=1
        fi
    fi
    if [ "$x2apic_ids" = 1 ]; then
        # 129 cores per socket need 8 bits of core id: socket 1's ids start at
        # 256. Socket 0's half are the boot vCPUs; socket 1's are added as CPU
        # devices before the guest starts (present at boot, not hot-plugged).
        half=$((cpus / 2))
        smp=$half,maxcpus=258,sockets=2,cores=129,threads=1
        for ((c = 0; c < half; c++)); do
            cpu_devices+=(-device "qemu64-x86_64-cpu,socket-id=1,core-id=$c,thread-id=0")
        done
        if [ "$numa" = 2 ]; then
            node_mb=$((mem_mb / 2))
            for n in 0 1; do
                numa_args+=(-object "memory-backend-ram,id=m$n,size=${node_mb}M"
                    -numa "node,nodeid=$n,memdev=m$n" -numa "cpu,node-id=$n,socket-id=$n")
            done
        fi
    elif [ "$numa" -gt 1 ]; then
        node_mb=$((mem_mb / numa))
        for ((n = 0; n < numa; n++)); do
            first=$((n * cpus / numa))
            last=$(((n + 1) * cpus / numa - 1))
            numa_args+=(-object "memory-backend-ram,id=m$n,size=${node_mb}M"
                -numa "node,nodeid=$n,cpus=$first-$last,memdev=m$n")
        done
    fi
    # Above 255 vCPUs (or with --machine q35): x2APIC, which Linux turns on
    # only with interrupt remapping, hence the IOMMU (eim: extended interrupt
    # mode, 32-bit destination ids).
    machine_args=(-machine pc)
    # shellcheck disable=SC2054 # the commas are qemu's option syntax
    [ "$machine" = q35 ] && machine_args=(-machine q35 -cpu "$q35_cpu" -device "$q35_iommu")
    if [ "$late_online" = 1 ]; then
        # No PIT, HPET or MTRRs for a guest bringing CPUs online after boot
        # (see the kernel command line above).
        # shellcheck disable=SC2054 # the commas are qemu's option syntax
        case $machine in
            q35) machine_args=(-machine q35,pit=off,hpet=off -cpu "$q35_cpu,mtrr=off" -device "$q35_iommu") ;;
            pc) machine_args=(-machine pc,pit=off,hpet=off -cpu qemu64,mtrr=off) ;;
        esac
    fi
    # A path in a -chardev option's value has each comma doubled (qemu's
    # escape there: a comma in $TMPDIR or the work directory's path ended the
    # value, "Invalid parameter"); the other paths are whole arguments
    # (-kernel, -initrd, -L, and -serial file:, whose rest qemu takes as it is).
    # shellcheck disable=SC2054 # the commas are qemu's option syntax
    qemu=("${qemu_cmd[@]}" -nodefaults -no-user-config "${machine_args[@]}"
        -accel "tcg,thread=$tcg" -smp "$smp" ${cpu_devices[@]+"${cpu_devices[@]}"}
        -m "${mem_mb}M" ${numa_args[@]+"${numa_args[@]}"}
        -kernel "$kernel" -initrd "$initrd" -append "$append"
        -display none -monitor none
        -serial "file:$console"
        -chardev "file,id=result,path=${result//,/,,}" -serial chardev:result
        -no-reboot ${qemu_extra[@]+"${qemu_extra[@]}"})
}
