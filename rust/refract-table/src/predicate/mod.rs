//! The predicate language: a small SQL-like filter parsed into a typed expression and evaluated on Arrow batches.
