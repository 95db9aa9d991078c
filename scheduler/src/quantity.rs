//! Exact parsing of Kubernetes resource quantities (`100m`, `1.5`, `2Gi`, `1e3`, `500M`, `0.1Ki`).
//!
//! kube-scheduler reads CPU with `Quantity.MilliValue()` and everything else with
//! `Quantity.Value()`; both round *up* to the next integer at their scale. We keep the number as
//! an exact decimal mantissa with a power-of-ten and a power-of-two exponent, so `0.1Ki`
//! (= 102.4) becomes 103 bytes exactly as upstream computes it, with no floating point.
//!
//! The grammar is upstream's (`k8s.io/apimachinery/pkg/api/resource`):
//! `<sign><digits>[.<digits>][<suffix>]` where suffix is a binary SI suffix (`Ki` … `Ei`), a
//! decimal SI suffix (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent
//! (`e3`, `E-2`). Values beyond `i64` saturate at `i64::MAX`, like upstream.

use std::fmt;

/// Why a quantity string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The string is empty.
    #[error("quantity is empty")]
    Empty,
    /// The string does not follow the quantity grammar.
    #[error(
        "quantity {0:?} is not a valid Kubernetes quantity (expected e.g. 100m, 1.5, 2Gi, 1e3)"
    )]
    Syntax(String),
    /// The number has more digits than we can represent exactly.
    #[error("quantity {0:?} has too many digits")]
    TooPrecise(String),
    /// A negative amount where only non-negative ones mean something (requests, limits,
    /// capacity); [`Quantity::parse`] itself accepts negative quantities.
    #[error("quantity {0:?} is negative; requests, limits and capacities must not be")]
    Negative(String),
}

/// A parsed quantity: `mantissa × 10^exp10 × 2^exp2`, with a sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// More digits than this cannot be held exactly in a `u128` mantissa; upstream itself keeps
/// 18 significant digits in its fast path, so real manifests never come close.
const MAX_DIGITS: usize = 36;

impl Quantity {
    /// Parses a quantity string.
    pub fn parse(s: &str) -> Result<Quantity, Error> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::Empty);
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            i = 1;
        }
        let mut mantissa: u128 = 0;
        let mut digits = 0usize;
        let mut frac_digits = 0i32;
        let mut seen_digit = false;
        let mut seen_point = false;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                seen_digit = true;
                // Leading zeros do not count toward precision.
                if mantissa != 0 || c != b'0' {
                    digits += 1;
                    if digits > MAX_DIGITS {
                        return Err(Error::TooPrecise(s.to_string()));
                    }
                }
                mantissa = mantissa * 10 + u128::from(c - b'0');
                if seen_point {
                    frac_digits += 1;
                }
            } else if c == b'.' && !seen_point {
                seen_point = true;
            } else {
                break;
            }
            i += 1;
        }
        if !seen_digit {
            return Err(Error::Syntax(s.to_string()));
        }
        let suffix = &s[i..];
        let (exp10, exp2) = match suffix {
            "" => (0, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            _ => {
                let rest = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or_else(|| Error::Syntax(s.to_string()))?;
                let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Error::Syntax(s.to_string()));
                }
                let e: i32 = rest.parse().map_err(|_| Error::Syntax(s.to_string()))?;
                if !(-1000..=1000).contains(&e) {
                    return Err(Error::Syntax(s.to_string()));
                }
                (e, 0)
            }
        };
        Ok(Quantity {
            negative: negative && mantissa != 0,
            mantissa,
            exp10: exp10 - frac_digits,
            exp2,
        })
    }

    /// The value at scale `10^scale` as an `i128`, rounded up (toward +∞ for positives, toward
    /// zero for negatives, as upstream's ceiling rounding does), saturating.
    fn scaled(&self, scale: i32) -> i128 {
        if self.mantissa == 0 {
            return 0;
        }
        // value / 10^scale = mantissa × 2^exp2 × 10^(exp10 - scale)
        let e = self.exp10 - scale;
        let saturated = if self.negative { i128::MIN } else { i128::MAX };
        let Some(mut num) = self.mantissa.checked_mul(1u128 << self.exp2.min(127)) else {
            return saturated;
        };
        let mut den: u128 = 1;
        if e >= 0 {
            for _ in 0..e {
                match num.checked_mul(10) {
                    Some(v) => num = v,
                    None => return saturated,
                }
            }
        } else {
            for _ in 0..(-e) {
                match den.checked_mul(10) {
                    Some(v) => den = v,
                    // The value is far below one unit at this scale.
                    None => return if self.negative { 0 } else { 1 },
                }
            }
        }
        let q = num / den;
        let magnitude = if !self.negative && num % den != 0 {
            q + 1
        } else {
            q
        };
        match i128::try_from(magnitude) {
            Ok(v) if self.negative => -v,
            Ok(v) => v,
            Err(_) => saturated,
        }
    }

    /// The quantity in billionths (`n`), rounded up: the exact scale at which pod requests are
    /// summed before upstream's per-pod rounding.
    pub fn nano_value(&self) -> i128 {
        self.scaled(-9)
    }

    /// `Quantity.Value()`: whole units, rounded up.
    pub fn value(&self) -> i64 {
        saturate(self.scaled(0))
    }

    /// `Quantity.MilliValue()`: thousandths, rounded up.
    pub fn milli_value(&self) -> i64 {
        saturate(self.scaled(-3))
    }

    /// True when the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }
}

/// Clamps to the `i64` range, as upstream's `Value()` does.
pub fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Rounds a nano-scaled sum up to whole units (`Value()`), saturating.
pub fn nanos_to_value(n: i128) -> i64 {
    saturate(ceil_div(n, 1_000_000_000))
}

/// Rounds a nano-scaled sum up to thousandths (`MilliValue()`), saturating.
pub fn nanos_to_milli(n: i128) -> i64 {
    saturate(ceil_div(n, 1_000_000))
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 { q + 1 } else { q }
}

/// Formats a byte count the way operators read it (`1.5Gi`, `512Mi`, `100`).
pub fn format_bytes(v: i64) -> String {
    const UNITS: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (unit, size) in UNITS {
        // `unsigned_abs`: `i64::MIN.abs()` overflows (a saturated negative quantity).
        if v.unsigned_abs() >= size as u64 {
            let x = v as f64 / size as f64;
            return if v % size == 0 {
                format!("{}{unit}", v / size)
            } else {
                format!("{x:.1}{unit}")
            };
        }
    }
    v.to_string()
}

/// Formats millicores (`1500m`, `2`).
pub fn format_milli(v: i64) -> String {
    if v % 1000 == 0 {
        (v / 1000).to_string()
    } else {
        format!("{v}m")
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.milli_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_upstream() {
        let cases: &[(&str, i64, i64)] = &[
            // (input, Value(), MilliValue())
            ("100m", 1, 100),
            ("1.5", 2, 1500),
            ("2Gi", 2 << 30, (2i64 << 30) * 1000),
            ("1e3", 1000, 1_000_000),
            ("500M", 500_000_000, 500_000_000_000),
            ("0.1Ki", 103, 102_400),
            ("0", 0, 0),
            ("1", 1, 1000),
            ("250m", 1, 250),
            ("0.5", 1, 500),
            ("1.25m", 1, 2),
            ("128Mi", 128 << 20, (128i64 << 20) * 1000),
            ("1k", 1000, 1_000_000),
            ("3E-2", 1, 30),
            ("+4", 4, 4000),
            ("-1", -1, -1000),
            ("-0.5", 0, -500),
            ("12n", 1, 1),
            ("7u", 1, 1),
            (".5", 1, 500),
            ("5.", 5, 5000),
            ("1Ei", 1 << 60, i64::MAX),
            ("9E", 9_000_000_000_000_000_000, i64::MAX),
            ("100E", i64::MAX, i64::MAX),
        ];
        for (s, v, m) in cases {
            let q = Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(q.value(), *v, "Value({s})");
            assert_eq!(q.milli_value(), *m, "MilliValue({s})");
        }
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "", " ", "abc", "1x", "1Kib", "--1", "1.2.3", "e3", "1e", "1e+", "Gi", "1 Gi", "0x10",
            "1e99999",
        ] {
            assert!(Quantity::parse(s).is_err(), "{s:?} should be rejected");
        }
        assert!(matches!(
            Quantity::parse("1234567890123456789012345678901234567890"),
            Err(Error::TooPrecise(_))
        ));
    }

    #[test]
    fn formats() {
        assert_eq!(format_bytes(3 << 30), "3Gi");
        assert_eq!(format_bytes(1536 << 20), "1.5Gi");
        assert_eq!(format_bytes(512), "512");
        assert_eq!(format_milli(1500), "1500m");
        assert_eq!(format_milli(2000), "2");
        // Regression: a saturated negative quantity (`-8200E20`) overflowed `abs()`.
        assert_eq!(format_bytes(i64::MIN), "-8192Pi");
        assert_eq!(
            format_bytes(Quantity::parse("-8200E20").unwrap().value()),
            "-8192Pi"
        );
        assert_eq!(format_milli(i64::MIN), "-9223372036854775808m");
    }
}
