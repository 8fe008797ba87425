//! How herd prints a metric's value: the one rule every table, chart and
//! summary uses. A leaf module (it imports nothing of herd's), so both
//! `perf` (per-CPU tables) and `export` (every other table) use it without
//! an import circle.

/// A metric value: integral values as integers (counts: `100000`, `0`),
/// others with four significant digits (`17.64`, `0.8752`, `0.04580`),
/// no decimals from 10,000 up (`22659`), an exponent only below 1e-6.
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let mut mag = v.abs().log10().floor() as i32;
    // Rounding to four digits can carry into the next power of ten
    // (9.99996 -> 10.000): then it has one decimal too many.
    if (-6..4).contains(&mag) {
        let decimals = (3 - mag).clamp(0, 9) as usize;
        let rounded: f64 = format!("{v:.decimals$}").parse().unwrap_or(v);
        if rounded.abs() >= 10f64.powi(mag + 1) {
            mag += 1;
        }
    }
    if mag >= 4 {
        format!("{v:.0}")
    } else if mag >= -6 {
        let decimals = (3 - mag).clamp(0, 9) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_format() {
        assert_eq!(fmt_value(1234567.8), "1234568");
        assert_eq!(fmt_value(22659.1), "22659");
        assert_eq!(fmt_value(17.635), "17.64");
        assert_eq!(fmt_value(12.3456), "12.35");
        assert_eq!(fmt_value(0.0458), "0.04580");
        assert_eq!(fmt_value(0.00123456), "0.001235");
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(-3.0), "-3");
        assert_eq!(fmt_value(100000.0), "100000");
        assert_eq!(fmt_value(40412.7), "40413");
        assert_eq!(fmt_value(2.5e-9), "2.500e-9");
        assert_eq!(fmt_value(f64::NAN), "NaN");
        // Four significant digits also when rounding carries over a power
        // of ten (these printed 10.000, 1.0000, 0.010000, -100.00).
        assert_eq!(fmt_value(9.99996), "10.00");
        assert_eq!(fmt_value(0.999996), "1.000");
        assert_eq!(fmt_value(0.00999996), "0.01000");
        assert_eq!(fmt_value(-99.9996), "-100.0");
        assert_eq!(fmt_value(9999.6), "10000");
        assert_eq!(fmt_value(9.9994), "9.999");
    }
}
