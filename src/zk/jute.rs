//! Jute, ZooKeeper's record encoding: big-endian integers, one-byte
//! booleans, and length-prefixed buffers, strings and vectors in which a
//! length of -1 means null.

use std::fmt;

/// A record that could not be decoded: the bytes end early, a length is
/// impossible, or a string is not UTF-8. The connection that carried it can
/// no longer be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed ZooKeeper record: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// Appends jute values to a byte buffer.
#[derive(Debug, Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn int(&mut self, value: i32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn long(&mut self, value: i64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn bool(&mut self, value: bool) -> &mut Self {
        self.bytes.push(u8::from(value));
        self
    }

    /// A buffer; `None` is null (length -1).
    pub fn buffer(&mut self, value: Option<&[u8]>) -> &mut Self {
        match value {
            None => self.int(-1),
            Some(bytes) => {
                self.int(length(bytes.len()));
                self.bytes.extend_from_slice(bytes);
                self
            }
        }
    }

    pub fn string(&mut self, value: &str) -> &mut Self {
        self.buffer(Some(value.as_bytes()))
    }

    /// A vector: its length, then each item as `item` writes it.
    pub fn vector<T>(&mut self, items: &[T], mut item: impl FnMut(&mut Self, &T)) -> &mut Self {
        self.int(length(items.len()));
        for value in items {
            item(self, value);
        }
        self
    }
}

/// Lengths beyond i32 cannot be sent; the server's limit (jute.maxbuffer)
/// is far below, and it answers an oversized packet by hanging up.
fn length(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

/// Reads jute values from a received record.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.bytes.len() < n {
            return Err(Malformed("record ends early"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn int(&mut self) -> Result<i32, Malformed> {
        let bytes = self.take(4)?;
        Ok(i32::from_be_bytes(bytes.try_into().expect("4 bytes")))
    }

    pub fn long(&mut self) -> Result<i64, Malformed> {
        let bytes = self.take(8)?;
        Ok(i64::from_be_bytes(bytes.try_into().expect("8 bytes")))
    }

    pub fn bool(&mut self) -> Result<bool, Malformed> {
        Ok(self.take(1)?[0] != 0)
    }

    /// A buffer; null (length -1) is `None`.
    pub fn buffer(&mut self) -> Result<Option<&'a [u8]>, Malformed> {
        match self.int()? {
            -1 => Ok(None),
            len => {
                let len = usize::try_from(len).map_err(|_| Malformed("negative length"))?;
                self.take(len).map(Some)
            }
        }
    }

    /// A string; null reads as empty, as ZooKeeper's Java client reads it.
    pub fn string(&mut self) -> Result<String, Malformed> {
        let bytes = self.buffer()?.unwrap_or_default();
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed("string is not UTF-8"))
    }

    /// A vector; null reads as empty.
    pub fn vector<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T, Malformed>,
    ) -> Result<Vec<T>, Malformed> {
        let len = match self.int()? {
            -1 => 0,
            len => usize::try_from(len).map_err(|_| Malformed("negative length"))?,
        };
        // Every item on the wire takes at least four bytes (a length, an
        // int): room for no more than the rest of the packet can hold, so a
        // bogus length fails on the bytes, not on the allocation.
        let mut items = Vec::with_capacity(len.min(self.bytes.len() / 4));
        for _ in 0..len {
            items.push(item(self)?);
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_are_big_endian_and_round_trip() {
        let mut w = Writer::default();
        w.int(-2)
            .long(0x0102_0304_0506_0708)
            .bool(true)
            .string("/a");
        w.buffer(None).vector(&[7, 8], |w, v| {
            w.int(*v);
        });
        assert_eq!(
            w.bytes,
            [
                0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 0, 0, 2, b'/', b'a', 0xff,
                0xff, 0xff, 0xff, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 8
            ]
        );
        let mut r = Reader::new(&w.bytes);
        assert_eq!(r.int(), Ok(-2));
        assert_eq!(r.long(), Ok(0x0102_0304_0506_0708));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.string().as_deref(), Ok("/a"));
        assert_eq!(r.buffer(), Ok(None));
        assert_eq!(r.vector(Reader::int), Ok(vec![7, 8]));
        assert!(r.is_empty());
    }

    #[test]
    fn short_or_impossible_records_are_malformed_not_panics() {
        assert!(Reader::new(&[0, 0, 1]).int().is_err());
        assert!(Reader::new(&[0, 0, 0, 9, b'x']).buffer().is_err());
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xfe]).buffer().is_err());
        assert!(
            Reader::new(&[0x7f, 0xff, 0xff, 0xff])
                .vector(Reader::int)
                .is_err()
        );
        assert!(Reader::new(&[0, 0, 0, 1, 0xff]).string().is_err());
    }
}
