//! What DIGEST-MD5's server messages ask and prove: the challenge's
//! directives (RFC 2831 section 2.1.1) and the final `rspauth` (2.1.3).

use anyhow::{Context, anyhow, bail};

use super::syntax::directives;

/// What a challenge asks of us.
#[derive(Debug, PartialEq)]
pub struct Challenge {
    pub realm: Option<String>,
    pub nonce: String,
    /// `charset=utf-8`: values outside ISO 8859-1 are hashed in UTF-8.
    pub utf8: bool,
}

impl Challenge {
    pub fn parse(token: &[u8]) -> anyhow::Result<Challenge> {
        let text = std::str::from_utf8(token).context("not UTF-8")?;
        let mut realm = None;
        let (mut nonce, mut qop, mut charset, mut algorithm) = (None, None, None, None);
        for (name, value) in directives(text)? {
            let slot = match name.as_str() {
                // Several realms may be offered: use the first (ZooKeeper
                // offers exactly one).
                "realm" => {
                    realm.get_or_insert(value);
                    continue;
                }
                "nonce" => &mut nonce,
                "qop" => &mut qop,
                "charset" => &mut charset,
                "algorithm" => &mut algorithm,
                // stale, maxbuf, cipher and extensions do not concern
                // authentication without a security layer.
                _ => continue,
            };
            if slot.replace(value).is_some() {
                bail!("`{name}` is given twice");
            }
        }
        let nonce = nonce.ok_or_else(|| anyhow!("no nonce"))?;
        // No qop means "auth" (RFC 2831 2.1.1).
        if let Some(qop) = qop {
            if !qop
                .split(',')
                .any(|q| q.trim().eq_ignore_ascii_case("auth"))
            {
                bail!("the server does not offer qop auth (only `{qop}`)");
            }
        }
        let utf8 = match charset {
            None => false,
            Some(charset) if charset.eq_ignore_ascii_case("utf-8") => true,
            Some(charset) => bail!("unknown charset `{charset}`"),
        };
        match algorithm {
            Some(algorithm) if algorithm.eq_ignore_ascii_case("md5-sess") => {}
            Some(algorithm) => bail!("unknown algorithm `{algorithm}`"),
            None => bail!("no algorithm (md5-sess is required)"),
        }
        Ok(Challenge { realm, nonce, utf8 })
    }
}

/// The `rspauth` of the server's last answer.
pub fn server_proof(token: &[u8]) -> anyhow::Result<String> {
    let text = std::str::from_utf8(token).context("not UTF-8")?;
    let mut proofs = directives(text)?
        .into_iter()
        .filter(|(name, _)| name == "rspauth");
    match (proofs.next(), proofs.next()) {
        (Some((_, proof)), None) => Ok(proof),
        (None, _) => bail!("no rspauth"),
        (Some(_), Some(_)) => bail!("`rspauth` is given twice"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_as_rfc_2831_writes_them() {
        let cases = [
            // Spaces, empty elements, names in any case, a qop list, an
            // escaped quote, several realms (the first is used), extensions.
            (
                " ,REALM = \"a\\\"b\" , realm=\"second\",, nonce=\"n,1\",\tqop=\"auth-int, auth\", \
                 Algorithm=MD5-SESS,stale=true,maxbuf=65536,x-ext=\"?\" ,",
                Challenge {
                    realm: Some("a\"b".into()),
                    nonce: "n,1".into(),
                    utf8: false,
                },
            ),
            // No qop means auth; no realm; a token nonce.
            (
                "nonce=abc,algorithm=md5-sess,charset=UTF-8",
                Challenge {
                    realm: None,
                    nonce: "abc".into(),
                    utf8: true,
                },
            ),
        ];
        for (challenge, expected) in cases {
            assert_eq!(
                Challenge::parse(challenge.as_bytes()).unwrap(),
                expected,
                "{challenge}"
            );
        }
    }

    #[test]
    fn challenges_that_cannot_be_answered_are_refused() {
        let cases: [(&[u8], &str); 9] = [
            (b"algorithm=md5-sess", "no nonce"),
            (
                b"nonce=\"a\",nonce=\"b\",algorithm=md5-sess",
                "`nonce` is given twice",
            ),
            (
                b"nonce=a,algorithm=md5-sess,algorithm=md5-sess",
                "`algorithm` is given twice",
            ),
            (b"nonce=a", "no algorithm"),
            (b"nonce=a,algorithm=md5", "unknown algorithm `md5`"),
            (
                b"nonce=a,algorithm=md5-sess,qop=\"auth-conf\"",
                "does not offer qop auth",
            ),
            (
                b"nonce=a,algorithm=md5-sess,charset=latin1",
                "unknown charset `latin1`",
            ),
            (b"nonce=\"a,algorithm=md5-sess", "not closed"),
            (b"nonce=\xff,algorithm=md5-sess", "not UTF-8"),
        ];
        for (challenge, why) in cases {
            let err = Challenge::parse(challenge).err().unwrap();
            assert!(
                format!("{err:#}").contains(why),
                "{err:#} for {challenge:?}"
            );
        }
    }

    #[test]
    fn the_answer_must_carry_one_rspauth() {
        assert_eq!(server_proof(b" rspauth=ab12 ,").unwrap(), "ab12");
        let cases: [(&[u8], &str); 4] = [
            (b"", "no rspauth"),
            (b"realm=\"x\"", "no rspauth"),
            (b"rspauth=", "has no value"),
            (b"rspauth=ab12,rspauth=ab12", "`rspauth` is given twice"),
        ];
        for (answer, why) in cases {
            let err = server_proof(answer).err().unwrap();
            assert!(format!("{err:#}").contains(why), "{err:#} for {answer:?}");
        }
    }
}
