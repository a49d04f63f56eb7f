//! A size in bytes, as given on the command line: a number, or one with a
//! binary unit (`512K`, `4M`, `4MiB`).

use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub usize);

impl FromStr for Bytes {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        const HOW: &str = "use a number of bytes, or one with K or M (KiB, MiB), like 4M";
        let text = text.trim();
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        let number: usize = number.parse().map_err(|_| format!("not a size; {HOW}"))?;
        let scale: usize = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            _ => return Err(format!("not a size; {HOW}")),
        };
        number
            .checked_mul(scale)
            .map(Bytes)
            .ok_or_else(|| "too large a size".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        let size = |text: &str| text.parse::<Bytes>().map(|b| b.0);
        assert_eq!(size("1048575"), Ok(1_048_575));
        assert_eq!(size("512K"), Ok(512 << 10));
        assert_eq!(size("4M"), Ok(4 << 20));
        assert_eq!(size("4 MiB"), Ok(4 << 20));
        assert_eq!(size("1g"), Ok(1 << 30));
        for bad in ["", "M", "-1", "4X", "1.5M", "99999999999999999999G"] {
            assert!(size(bad).is_err(), "{bad}");
        }
    }
}
