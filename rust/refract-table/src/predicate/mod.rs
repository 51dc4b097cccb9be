//! The predicate language: a small SQL-like filter parsed into a typed expression and evaluated on Arrow batches.
//!
//! ```text
//! id % 10 = 3 AND (name = 'it''s' OR score >= 1.5e3)
//! NOT contains(title, 'draft') AND "Owner Id" NOT IN (1, 2, -3)
//! deleted_at IS NULL OR 100 < amount
//! ```
//!
//! * Comparisons `=`, `!=`/`<>`, `<`, `<=`, `>`, `>=` between one column and
//!   one literal, in either order (`5 < x` is stored as `x > 5`).
//! * Literals: integers (`-3`), floats (`1.5`, `.5`, `2e-3`), strings in single
//!   quotes with `''` for a quote, `true`/`false`. `NULL` only in `IS [NOT] NULL`.
//! * `column % n op m` with integers `n != 0`, `m`: the remainder has the sign
//!   of the dividend (Rust `%`, SQL `MOD`): `-7 % 3 = -1`, `7 % -3 = 1`.
//! * `column [NOT] IN (literal, ...)`, `column IS [NOT] NULL`,
//!   `contains(column, 'substring')` (case-sensitive, string columns).
//! * `NOT` binds tighter than `AND`, which binds tighter than `OR`;
//!   parentheses group. Keywords are case-insensitive; identifiers are
//!   `[A-Za-z_][A-Za-z0-9_]*` (case-sensitive) or `"double quoted"` with `""`
//!   for a quote (needed for names that are keywords).
//!
//! Errors: malformed text is [`Error::InvalidInput`](refract_core::Error)
//! `syntax error at position P: expected …`, with `P` the 1-based character
//! position. Input over [`MAX_INPUT_BYTES`] or nested (parentheses and `NOT`)
//! deeper than [`MAX_DEPTH`] is rejected the same way, so parsing never
//! exhausts the stack.
//!
//! Evaluation ([`Expr::evaluate`]) uses SQL three-valued logic and Arrow's
//! kernels; rows whose result is null are `false` in the returned mask. Value
//! semantics are documented on [`Expr::evaluate`].

mod eval;
mod expr;
mod leaf;
mod lexer;
mod numeric;
mod parser;
mod validate;

pub use expr::{CompareOp, Expr, Literal};

use refract_core::{Error, Result};

/// Longest accepted predicate text, in bytes.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

/// Deepest accepted nesting of parentheses and `NOT`.
pub const MAX_DEPTH: usize = 256;

/// Parses predicate text into an [`Expr`].
///
/// The result is not checked against a schema; call [`Expr::validate`] for
/// that (evaluation does it too).
///
/// # Errors
/// InvalidInput for a syntax error (naming its position), input over
/// [`MAX_INPUT_BYTES`] or nesting deeper than [`MAX_DEPTH`].
pub fn parse(input: &str) -> Result<Expr> {
    if input.len() > MAX_INPUT_BYTES {
        return Err(Error::invalid_input(format!(
            "predicate is {} bytes long; the limit is {MAX_INPUT_BYTES} bytes",
            input.len()
        )));
    }
    parser::parse_tokens(input)
}

#[cfg(test)]
mod proptests;
