//! Shared helpers for Refract benchmarks (JSON-line output, RSS measurement).
