//! Renderers: table, JSON, CSV, Markdown, SVG (being built).
