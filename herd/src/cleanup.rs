//! Exit-cleanup strategies (being built: herd compare issue).
