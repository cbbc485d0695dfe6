# SPDX-License-Identifier: MIT
"""The modules of bench/programs.py (real programs, TCP loopback vs usmc).

    common     constants, METRICS, number formatting, log()
    procs      process groups (the one PROCS registry), /proc CPU accounting,
               environments
    workloads  the per-run context, sockperf / redis / nginx runners, WORKLOADS,
               perf stat helpers
    measure    the measurement loop, summaries, text table, plot
    explain    "Where the time goes": profile-based paragraphs per workload
    doc        `usmc bench` runs and the docs/performance.md writer

bench/programs.py is the entry point (command line, machine description, main).
"""
