//! The C library's `pow`, defined in the binary so that libm.so.6 is not
//! loaded.
//!
//! indicatif's rate estimator calls `f64::powf`, which LLVM lowers to a call
//! of the C `pow`: the only symbol zklock needs from libm.so.6. Loading that
//! library cost every run about 0.16 ms (open, map, relocate) and every
//! waiting process 0.3 MiB of resident pages (bench/RESULTS.md). With `pow`
//! defined here the linker resolves the call inside the binary, and
//! `--as-needed` (rustc's default for libraries) leaves libm.so.6 out of the
//! binary's needed libraries; `.ci/package` checks that it stays out. The
//! `libm` crate is rust-lang's port of musl's libm, the one
//! compiler-builtins uses.
//!
//! rustc exports a `no_mangle` function from an executable, so a shared
//! library loaded later that calls `pow` binds to this one: the same
//! function (musl's algorithm, within an ulp of glibc's).

/// `pow(3)`.
#[unsafe(no_mangle)]
pub extern "C" fn pow(base: f64, exponent: f64) -> f64 {
    libm::pow(base, exponent)
}

#[cfg(test)]
mod tests {
    use super::pow;

    #[test]
    fn agrees_with_the_c_library_on_indicatifs_weights() {
        // indicatif weighs a sample of age `a` seconds by 0.1^(a/15).
        for age in [0.0, 0.001, 0.5, 1.0, 15.0, 60.0, 3600.0] {
            let exponent = age / 15.0;
            let expected = (exponent * 0.1_f64.ln()).exp();
            let got = pow(0.1, exponent);
            assert!(
                (got - expected).abs() <= expected * 1e-12,
                "{age}: {got} vs {expected}"
            );
        }
        assert_eq!(pow(2.0, 10.0), 1024.0);
        assert!(pow(-1.0, 0.5).is_nan());
    }
}
