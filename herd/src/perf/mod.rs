//! perf counters (being built: herd perf counters issue).
