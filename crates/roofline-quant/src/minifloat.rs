//! Small floating-point element formats (FP8 E4M3/E5M2, FP6 E3M2/E2M3, FP4 E2M1, BF16): round-to-nearest-
//! even casts from f32, saturating at the largest finite value, and their bit codes.

/// A sign/exponent/mantissa layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiniFloat {
    /// Exponent bits.
    pub exp_bits: u32,
    /// Stored mantissa bits.
    pub man_bits: u32,
    /// Largest finite magnitude.
    pub max: f32,
}

/// OCP FP8 E4M3 (no infinities, max 448).
pub const E4M3: MiniFloat = MiniFloat { exp_bits: 4, man_bits: 3, max: 448.0 };
/// OCP FP8 E5M2 (max 57344).
pub const E5M2: MiniFloat = MiniFloat { exp_bits: 5, man_bits: 2, max: 57344.0 };
/// OCP FP6 E3M2 (max 28).
pub const E3M2: MiniFloat = MiniFloat { exp_bits: 3, man_bits: 2, max: 28.0 };
/// OCP FP6 E2M3 (max 7.5).
pub const E2M3: MiniFloat = MiniFloat { exp_bits: 2, man_bits: 3, max: 7.5 };
/// OCP FP4 E2M1 (max 6).
pub const E2M1: MiniFloat = MiniFloat { exp_bits: 2, man_bits: 1, max: 6.0 };
/// bfloat16 (max 3.3895e38).
pub const BF16: MiniFloat = MiniFloat { exp_bits: 8, man_bits: 7, max: 3.389_531_4e38 };

impl MiniFloat {
    /// Exponent bias.
    pub const fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    /// Bits of one code (sign included).
    pub const fn bits(self) -> u32 {
        1 + self.exp_bits + self.man_bits
    }

    /// Rounds `x` to the nearest representable value (ties to even), saturating to ±max. NaN stays NaN.
    pub fn round(self, x: f32) -> f32 {
        if x.is_nan() {
            return x;
        }
        let a = f64::from(x.abs());
        if a == 0.0 {
            return 0.0f32.copysign(x);
        }
        let min_exp = 1 - self.bias(); // exponent of the smallest normal
        let e = (floor_log2(a)).max(min_exp);
        // quantum = 2^(e - man_bits); a / quantum is exact in f64 for any f32 input
        let quantum = exp2i(e - self.man_bits as i32);
        let q = round_half_even(a / quantum) * quantum;
        (q.min(f64::from(self.max)) as f32).copysign(x)
    }

    /// The bit code of a value already on the grid (as returned by [`MiniFloat::round`]).
    pub fn encode(self, v: f32) -> u32 {
        let sign = u32::from(v.is_sign_negative()) << (self.exp_bits + self.man_bits);
        let a = f64::from(v.abs());
        if a == 0.0 {
            return sign;
        }
        let min_exp = 1 - self.bias();
        let e = floor_log2(a);
        if e < min_exp {
            let m = (a / exp2i(min_exp - self.man_bits as i32)).round() as u32;
            return sign | m;
        }
        let m = (a / exp2i(e - self.man_bits as i32)).round() as u32 - (1 << self.man_bits);
        sign | (((e + self.bias()) as u32) << self.man_bits) | m
    }

    /// The value of a bit code.
    pub fn decode(self, code: u32) -> f32 {
        let sign = if (code >> (self.exp_bits + self.man_bits)) & 1 == 1 { -1.0 } else { 1.0 };
        let e = (code >> self.man_bits) & ((1 << self.exp_bits) - 1);
        let m = code & ((1 << self.man_bits) - 1);
        let v = if e == 0 {
            f64::from(m) * exp2i(1 - self.bias() - self.man_bits as i32)
        } else {
            (1.0 + f64::from(m) / f64::from(1u32 << self.man_bits)) * exp2i(e as i32 - self.bias())
        };
        (sign * v) as f32
    }
}

/// `floor(log2(a))` of a positive, normal f64 (every f32 is normal as an f64), read off the exponent bits.
#[inline]
fn floor_log2(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// `2^k` for `-1022 <= k <= 1023`, built from its bits.
#[inline]
fn exp2i(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// Rounds half to even (NumPy's `round`).
pub fn round_half_even(x: f64) -> f64 {
    x.round_ties_even()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_every_value() {
        for f in [E4M3, E5M2, E3M2, E2M3, E2M1] {
            for code in 0..(1u32 << f.bits()) {
                let v = f.decode(code);
                if !v.is_finite() || v.abs() > f.max {
                    continue; // the NaN/Inf encodings of E4M3 and E5M2
                }
                assert_eq!(f.round(v), v, "{f:?} code {code:#x} value {v}");
                if v != 0.0 {
                    assert_eq!(f.encode(v), code, "{f:?} value {v}");
                }
            }
        }
    }

    #[test]
    fn ties_go_to_even_and_saturate() {
        assert_eq!(E2M1.round(2.5), 2.0);
        assert_eq!(E2M1.round(3.5), 4.0);
        assert_eq!(E2M1.round(5.0), 4.0);
        assert_eq!(E2M1.round(0.25), 0.0);
        assert_eq!(E2M1.round(0.75), 1.0);
        assert_eq!(E4M3.round(1000.0), 448.0);
        assert_eq!(E4M3.round(-1000.0), -448.0);
        assert_eq!(E4M3.decode(0x7e), 448.0);
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(-3.5), -4.0);
    }
}
