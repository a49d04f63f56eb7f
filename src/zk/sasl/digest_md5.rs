//! SASL DIGEST-MD5 (RFC 2831), the subset ZooKeeper's server speaks:
//! authentication only (qop "auth"), algorithm md5-sess, one nonce, and the
//! digest-uri its server checks, which ZooKeeper fixes rather than deriving
//! from a host name. The exchange: an empty initial response; the server's
//! challenge, answered with the digest-response; the server's `rspauth`,
//! which proves it knows the password too, checked before `Done`.

use std::borrow::Cow;

use anyhow::{Context, bail};
use md5::{Digest, Md5};

use crate::zk::sasl::{SaslMechanism, SaslStep};

mod challenge;
mod syntax;
use challenge::{Challenge, server_proof};
use syntax::quote;

/// ZooKeeper's server checks the digest-uri against its service name and a
/// server name that both sides hard-wire, whatever the host is called.
const ZOOKEEPER_DIGEST_URI: &str = "zookeeper/zk-sasl-md5";
/// The first and only response of a connection's exchange.
const NONCE_COUNT: &str = "00000001";

/// The DIGEST-MD5 client for one connection (a reconnection starts anew).
pub struct DigestMd5 {
    user: String,
    password: String,
    digest_uri: &'static str,
    cnonce: String,
    phase: Phase,
}

enum Phase {
    Start,
    Challenge,
    /// The `rspauth` the server must send: the response-value computed with
    /// the digest-uri alone as A2.
    ServerProof(String),
    Finished,
}

impl DigestMd5 {
    /// Authenticates as `user` with `password`, with a fresh random cnonce.
    pub fn new(user: &str, password: &str) -> DigestMd5 {
        // The cnonce guards against chosen-plaintext attacks by a false
        // server: 122 random bits from the OS, through uuid's v4.
        let cnonce = uuid::Uuid::new_v4().simple().to_string();
        DigestMd5::with(user, password, ZOOKEEPER_DIGEST_URI, cnonce)
    }

    fn with(user: &str, password: &str, digest_uri: &'static str, cnonce: String) -> DigestMd5 {
        DigestMd5 {
            user: user.to_owned(),
            password: password.to_owned(),
            digest_uri,
            cnonce,
            phase: Phase::Start,
        }
    }

    /// The digest-response to `challenge`, and the `rspauth` expected back.
    fn respond(&self, challenge: &Challenge) -> anyhow::Result<(Vec<u8>, String)> {
        let utf8 = challenge.utf8;
        let realm = challenge.realm.as_deref().unwrap_or("");
        let mut secret = Md5::new();
        secret.update(hashed("the user name", &self.user, utf8)?);
        secret.update(b":");
        secret.update(hashed("the realm", realm, utf8)?);
        secret.update(b":");
        secret.update(hashed("the password", &self.password, utf8)?);
        let a1 = Md5::new()
            .chain_update(secret.finalize())
            .chain_update(format!(":{}:{}", challenge.nonce, self.cnonce));
        let ha1 = hex(&a1.finalize());
        let response_value = |a2: &str| {
            let ha2 = hex(&Md5::digest(a2));
            let (nonce, cnonce) = (&challenge.nonce, &self.cnonce);
            let kd = format!("{ha1}:{nonce}:{NONCE_COUNT}:{cnonce}:auth:{ha2}");
            hex(&Md5::digest(kd))
        };
        let uri = self.digest_uri;
        let response = response_value(&format!("AUTHENTICATE:{uri}"));
        let rspauth = response_value(&format!(":{uri}"));

        let mut text = String::new();
        if utf8 {
            text.push_str("charset=utf-8,");
        }
        text.push_str(&format!("username={}", quote(&self.user)));
        if let Some(realm) = &challenge.realm {
            text.push_str(&format!(",realm={}", quote(realm)));
        }
        text.push_str(&format!(
            ",nonce={},nc={NONCE_COUNT},cnonce={},digest-uri={},response={response},qop=auth",
            quote(&challenge.nonce),
            quote(&self.cnonce),
            quote(uri),
        ));
        // Without charset=utf-8 every value was checked to be ASCII, so the
        // UTF-8 text is also the ISO 8859-1 one RFC 2831 then asks for.
        Ok((text.into_bytes(), rspauth))
    }
}

impl SaslMechanism for DigestMd5 {
    fn step(&mut self, token: Option<&[u8]>) -> anyhow::Result<SaslStep> {
        // Any error leaves the exchange finished: it cannot be resumed.
        let phase = std::mem::replace(&mut self.phase, Phase::Finished);
        match (phase, token) {
            (Phase::Start, None) => {
                self.phase = Phase::Challenge;
                Ok(SaslStep::Send(Vec::new()))
            }
            (Phase::Challenge, Some(token)) => {
                let challenge = Challenge::parse(token).context("bad DIGEST-MD5 challenge")?;
                let (response, rspauth) = self.respond(&challenge)?;
                self.phase = Phase::ServerProof(rspauth);
                Ok(SaslStep::Send(response))
            }
            (Phase::ServerProof(expected), Some(token)) => {
                let given = server_proof(token).context("bad DIGEST-MD5 answer")?;
                if !given.eq_ignore_ascii_case(&expected) {
                    bail!(
                        "the server's DIGEST-MD5 rspauth is wrong: it does not know the \
                         password, so it is not the server it claims to be"
                    );
                }
                Ok(SaslStep::Done)
            }
            (Phase::Finished, _) => bail!("the DIGEST-MD5 exchange has already ended"),
            (Phase::Start, Some(_)) => bail!("DIGEST-MD5 starts with the client's empty response"),
            (_, None) => bail!("DIGEST-MD5 needs the server's token to go on"),
        }
    }
}

/// The bytes of `value` that go into the hash (RFC 2831 2.1.2.1): ISO
/// 8859-1 whenever every character fits it, even under charset=utf-8, and
/// UTF-8 otherwise. Without charset=utf-8 only ASCII is accepted, so that the
/// response, which is sent as UTF-8, needs no second encoding.
fn hashed<'a>(what: &str, value: &'a str, utf8: bool) -> anyhow::Result<Cow<'a, [u8]>> {
    if value.is_ascii() {
        Ok(Cow::Borrowed(value.as_bytes()))
    } else if !utf8 {
        bail!("{what} is not ASCII, and the server does not offer charset=utf-8")
    } else if value.chars().all(|c| u32::from(c) < 0x100) {
        // Every char is below 0x100, so `as u8` keeps it whole.
        Ok(Cow::Owned(value.chars().map(|c| c as u8).collect()))
    } else {
        Ok(Cow::Borrowed(value.as_bytes()))
    }
}

/// Lower-case hexadecimal, as RFC 2831's HEX().
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::syntax::directives;
    use super::*;

    /// RFC 2831 section 4's example: the challenge as the server sent it.
    const RFC_CHALLENGE: &str = "realm=\"elwood.innosoft.com\",nonce=\"OA6MG9tEQGm2hh\",\
                                 qop=\"auth\",algorithm=md5-sess,charset=utf-8";

    fn rfc_client() -> DigestMd5 {
        let cnonce = "OA6MHXh6VqTrRk".to_owned();
        DigestMd5::with("chris", "secret", "imap/elwood.innosoft.com", cnonce)
    }

    fn sent(step: anyhow::Result<SaslStep>) -> Vec<u8> {
        match step.expect("a step") {
            SaslStep::Send(token) => token,
            SaslStep::Done => panic!("done too early"),
        }
    }

    fn text(token: &[u8]) -> &str {
        std::str::from_utf8(token).unwrap()
    }

    /// The value of the directive `name` in `response`.
    fn field(response: &[u8], name: &str) -> String {
        let fields = directives(text(response)).unwrap();
        let mut values = fields.into_iter().filter(|(n, _)| n == name);
        values.next().unwrap_or_else(|| panic!("no {name}")).1
    }

    #[test]
    fn rfc_2831_example_gives_its_response_and_accepts_its_rspauth() {
        let mut client = rfc_client();
        assert!(
            sent(client.step(None)).is_empty(),
            "the initial response is empty"
        );
        let response = sent(client.step(Some(RFC_CHALLENGE.as_bytes())));
        assert_eq!(
            text(&response),
            "charset=utf-8,username=\"chris\",realm=\"elwood.innosoft.com\",\
             nonce=\"OA6MG9tEQGm2hh\",nc=00000001,cnonce=\"OA6MHXh6VqTrRk\",\
             digest-uri=\"imap/elwood.innosoft.com\",\
             response=d388dad90d4bbd760a152321f2143af7,qop=auth"
        );
        let rspauth = b"rspauth=ea40f60335c427b5527b84dbabcdfffd";
        assert!(matches!(client.step(Some(rspauth)), Ok(SaslStep::Done)));
        let again = client.step(Some(rspauth)).err().unwrap();
        assert!(again.to_string().contains("already ended"), "{again}");
    }

    #[test]
    fn zookeepers_challenge_gets_the_response_puresasl_computes() {
        // ZooKeeper's realm and digest-uri; the expected response and
        // rspauth were computed by puresasl (kazoo's SASL library) for this
        // cnonce.
        let challenge = "realm=\"zk-sasl-md5\",nonce=\"Z6n0Yd1qL3Ew/x8HcXqOWXmGvB2sTFyKu1zD0mWp\",\
                         charset=utf-8,algorithm=md5-sess,qop=\"auth\"";
        let cnonce = "0d3c5a0e9f8b4c1aa2f1e6d7c8b9a0f1".to_owned();
        let mut client = DigestMd5::with("backup", "s3cr3t", ZOOKEEPER_DIGEST_URI, cnonce);
        sent(client.step(None));
        let response = sent(client.step(Some(challenge.as_bytes())));
        assert_eq!(field(&response, "digest-uri"), "zookeeper/zk-sasl-md5");
        assert_eq!(field(&response, "realm"), "zk-sasl-md5");
        assert_eq!(
            field(&response, "response"),
            "169d0e28f35d54512c45923bd7cb930c"
        );
        let rspauth = b"rspauth=39df6fff6837b1e6e22b94a4707ec8e1";
        assert!(matches!(client.step(Some(rspauth)), Ok(SaslStep::Done)));
    }

    #[test]
    fn a_password_in_iso_8859_1_gets_the_response_zookeeper_accepts() {
        // Recorded from ZooKeeper 3.8's server (Java's DigestMD5Server),
        // which accepted this response for the JAAS user_latin="pässwörd"
        // and answered this rspauth; hashing the password's UTF-8 instead
        // was refused.
        let challenge = "realm=\"zk-sasl-md5\",nonce=\"9GWaDZYCVje68ahMoJKB+EeRG2SwWVF797Ps7mSb\",\
                         charset=utf-8,algorithm=md5-sess";
        let cnonce = "bb407a038276468f9f791490b8811ce0".to_owned();
        let mut client = DigestMd5::with("latin", "pässwörd", ZOOKEEPER_DIGEST_URI, cnonce);
        sent(client.step(None));
        let response = sent(client.step(Some(challenge.as_bytes())));
        assert_eq!(
            field(&response, "response"),
            "aa69e82400377b17328e4405068ac545"
        );
        let rspauth = b"rspauth=7e8ed0362dde85c77b220be806b33237";
        assert!(matches!(client.step(Some(rspauth)), Ok(SaslStep::Done)));
    }

    #[test]
    fn a_wrong_rspauth_is_refused_and_ends_the_exchange() {
        let mut client = rfc_client();
        sent(client.step(None));
        sent(client.step(Some(RFC_CHALLENGE.as_bytes())));
        // The right proof with its last digit changed.
        let err = (client.step(Some(b"rspauth=ea40f60335c427b5527b84dbabcdfffe")))
            .err()
            .unwrap();
        assert!(err.to_string().contains("rspauth is wrong"), "{err}");
        let proof = b"rspauth=ea40f60335c427b5527b84dbabcdfffd";
        assert!(
            client.step(Some(proof)).is_err(),
            "a failed exchange cannot go on"
        );
    }

    #[test]
    fn steps_out_of_order_are_refused() {
        let mut client = rfc_client();
        let err = client.step(Some(RFC_CHALLENGE.as_bytes())).err().unwrap();
        assert!(err.to_string().contains("starts with"), "{err}");
        let mut client = rfc_client();
        sent(client.step(None));
        assert!(client.step(None).is_err(), "a challenge is needed");
    }

    #[test]
    fn a_user_name_with_quotes_and_backslashes_is_escaped() {
        let user = "a\"b\\c";
        let mut client = DigestMd5::with(user, "pw", ZOOKEEPER_DIGEST_URI, "c".into());
        sent(client.step(None));
        let challenge = b"realm=\"zk-sasl-md5\",nonce=\"n\",algorithm=md5-sess,charset=utf-8";
        let response = sent(client.step(Some(challenge)));
        assert!(
            text(&response).contains(r#"username="a\"b\\c""#),
            "{}",
            text(&response)
        );
        let fields = directives(text(&response)).unwrap();
        assert_eq!(fields[1], ("username".to_owned(), user.to_owned()));
    }

    #[test]
    fn values_are_hashed_in_iso_8859_1_where_they_fit() {
        // RFC 2831 2.1.2.1: "é" fits ISO 8859-1 (one byte) even under
        // charset=utf-8; "€" does not, and is hashed in UTF-8. ZooKeeper's
        // server accepted passwords of both kinds hashed so.
        assert_eq!(&*hashed("it", "é", true).unwrap(), [0xe9]);
        assert_eq!(&*hashed("it", "€", true).unwrap(), "€".as_bytes());
        assert_eq!(&*hashed("it", "plain", false).unwrap(), b"plain");
        let err = hashed("the password", "é", false).err().unwrap();
        assert!(
            err.to_string().contains("the password is not ASCII"),
            "{err}"
        );
    }

    #[test]
    fn every_client_has_its_own_cnonce() {
        let (a, b) = (DigestMd5::new("u", "p"), DigestMd5::new("u", "p"));
        assert_eq!(a.cnonce.len(), 32);
        assert_ne!(a.cnonce, b.cnonce);
    }
}
