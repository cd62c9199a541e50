//! Kubernetes resource quantities (`500m`, `1.5`, `2Gi`, `1e3`, `128974848`)
//! read into the integers the planner and the builders compare.
//!
//! The grammar is Kubernetes' own (`apimachinery/pkg/api/resource`): an optional
//! sign, a decimal number, then a binary suffix (`Ki Mi Gi Ti Pi Ei`), a decimal
//! suffix (`n u m k M G T P E` or none) or a decimal exponent (`e3`, `E-2`).
//! Conversions round up, as Kubernetes' `Value()` and `MilliValue()` do, so a
//! request of `0.1m` cpu still counts as one millicore.

use thiserror::Error;

/// Why a string is not a usable quantity.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 128974848, 1e3)")]
    Syntax(String),
    #[error("{0:?} must not be negative")]
    Negative(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// A parsed quantity: `mantissa * 10^exp10 * 2^exp2`, with its sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// Exponents beyond this are refused rather than looped over.
const MAX_EXPONENT: i32 = 64;

fn parse(input: &str) -> Result<Parsed, QuantityError> {
    let syntax = || QuantityError::Syntax(input.to_string());
    let s = input.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_len);
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(syntax());
    }
    let mut mantissa: u128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(digit - b'0')))
            .ok_or_else(|| QuantityError::TooLarge(input.to_string()))?;
    }
    let fraction_digits = i32::try_from(fraction.len()).map_err(|_| syntax())?;
    let (exp10, exp2) = match suffix {
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "" => (0, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        other => {
            let exponent = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(syntax)?;
            let digits = exponent
                .strip_prefix('-')
                .or_else(|| exponent.strip_prefix('+'))
                .unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            let value: i32 = exponent.parse().map_err(|_| syntax())?;
            if value.abs() > MAX_EXPONENT {
                return Err(syntax());
            }
            (value, 0)
        }
    };
    Ok(Parsed {
        negative: negative && mantissa != 0,
        mantissa,
        exp10: exp10 - fraction_digits,
        exp2,
    })
}

/// `ceil(value * 10^scale)` as a non-negative integer.
fn ceil_scaled(input: &str, scale: i32) -> Result<u64, QuantityError> {
    let q = parse(input)?;
    if q.negative {
        return Err(QuantityError::Negative(input.to_string()));
    }
    let too_large = || QuantityError::TooLarge(input.to_string());
    let mut value = q
        .mantissa
        .checked_mul(1u128 << q.exp2)
        .ok_or_else(too_large)?;
    let exp10 = q.exp10 + scale;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.checked_mul(10).ok_or_else(too_large)?;
        }
    } else {
        // ceil(ceil(a / b) / c) == ceil(a / (b * c)) for positive integers, so
        // dividing one power of ten at a time rounds exactly once.
        for _ in 0..(-exp10) {
            value = value.div_ceil(10);
        }
    }
    u64::try_from(value).map_err(|_| too_large())
}

/// A cpu quantity in millicores, rounded up (`"1.5"` -> 1500, `"250m"` -> 250).
pub fn cpu_millis(quantity: &str) -> Result<u64, QuantityError> {
    ceil_scaled(quantity, 3)
}

/// A quantity as a whole number, rounded up: bytes for memory and storage,
/// a count for pods (`"1Gi"` -> 1073741824, `"1k"` -> 1000).
pub fn value(quantity: &str) -> Result<u64, QuantityError> {
    ceil_scaled(quantity, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_reads_millicores_whole_cores_and_decimals() {
        assert_eq!(cpu_millis("250m"), Ok(250));
        assert_eq!(cpu_millis("2"), Ok(2000));
        assert_eq!(cpu_millis("1.5"), Ok(1500));
        assert_eq!(cpu_millis("0.1"), Ok(100));
        assert_eq!(cpu_millis(".5"), Ok(500));
        assert_eq!(cpu_millis("1."), Ok(1000));
    }

    #[test]
    fn cpu_rounds_sub_millicore_requests_up() {
        assert_eq!(cpu_millis("0.1m"), Ok(1));
        assert_eq!(cpu_millis("1500u"), Ok(2));
        assert_eq!(cpu_millis("1n"), Ok(1));
        assert_eq!(cpu_millis("0"), Ok(0));
    }

    #[test]
    fn memory_reads_binary_and_decimal_suffixes() {
        assert_eq!(value("1Ki"), Ok(1024));
        assert_eq!(value("128Mi"), Ok(128 << 20));
        assert_eq!(value("1.5Gi"), Ok(3 << 29));
        assert_eq!(value("2Ti"), Ok(2 << 40));
        assert_eq!(value("1k"), Ok(1000));
        assert_eq!(value("1M"), Ok(1_000_000));
        assert_eq!(value("3G"), Ok(3_000_000_000));
        assert_eq!(value("1T"), Ok(1_000_000_000_000));
        assert_eq!(value("8148784Ki"), Ok(8_148_784 * 1024));
        assert_eq!(value("128974848"), Ok(128_974_848));
    }

    #[test]
    fn exponents_are_decimal_and_distinct_from_the_exa_suffix() {
        assert_eq!(value("1e3"), Ok(1000));
        assert_eq!(value("129e6"), Ok(129_000_000));
        assert_eq!(value("1E3"), Ok(1000));
        assert_eq!(value("12e-1"), Ok(2));
        assert_eq!(value("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(value("+5e+2"), Ok(500));
    }

    #[test]
    fn malformed_quantities_are_refused() {
        for bad in [
            "", "abc", "1.2.3", "1Gb", "1 Gi", "e3", "1e", "1e+", "--1", "1mi", ".",
        ] {
            assert!(
                matches!(value(bad), Err(QuantityError::Syntax(_))),
                "{bad:?} should be a syntax error"
            );
        }
    }

    #[test]
    fn negative_quantities_are_refused_but_minus_zero_is_zero() {
        assert_eq!(value("-1"), Err(QuantityError::Negative("-1".into())));
        assert_eq!(value("-0"), Ok(0));
    }

    #[test]
    fn quantities_beyond_u64_are_refused_not_wrapped() {
        assert!(matches!(value("20Ei"), Err(QuantityError::TooLarge(_))));
        assert!(matches!(
            value("99999999999999999999999999999999999999999"),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(value("1e99"), Err(QuantityError::Syntax(_))));
    }
}
