//! Thread backends (being built: herd storm issue).
