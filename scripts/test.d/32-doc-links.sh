#!/usr/bin/env bash
# rustdoc's own checks as errors: broken intra-doc links, unclosed HTML in
# doc comments. exitq is a library, so its public docs are what users read;
# herd is a binary whose docs are for its maintainers, so its private items
# are documented too (and links from a public module doc to a private item
# are expected there). testkit, the tests' shared set-up, alike.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "doc-links: cargo doc -p exitq (public, then --document-private-items), -p herd and -p testkit --document-private-items (-D warnings)" >&2
RUSTDOCFLAGS="-D warnings" cargo doc -q -p exitq --no-deps --target-dir target/doc-check
# The private modules too: the protocol reasoning lives in their docs.
RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" \
    cargo doc -q -p exitq --no-deps --document-private-items --target-dir target/doc-check
RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" \
    cargo doc -q -p herd --no-deps --document-private-items --target-dir target/doc-check
RUSTDOCFLAGS="-D warnings" \
    cargo doc -q -p testkit --no-deps --document-private-items --target-dir target/doc-check
