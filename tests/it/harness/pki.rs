//! A throwaway PKI for TLS tests, made with the `openssl` command once per test process.
//!
//! Nothing is checked in: the CA, server and client certificates (and the broken ones
//! for error tests) are generated into a temp dir on first use. Keys are EC P-256 in
//! PEM PKCS#8 (`-----BEGIN PRIVATE KEY-----`), which both rustls and ZooKeeper's PEM
//! key store read.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::TempDir;

/// The subject of the client certificate (openssl's order: most significant RDN
/// first); ZooKeeper's x509 provider names the client `x509:CN=zklock-client,O=zklock-test`
/// (RFC 2253 order, least significant first).
pub const CLIENT_SUBJECT: &str = "/O=zklock-test/CN=zklock-client";
/// How ZooKeeper (Java's `X500Principal.getName()`) spells [`CLIENT_SUBJECT`].
pub const CLIENT_DN: &str = "CN=zklock-client,O=zklock-test";
/// A second client identity of the same CA, and how ZooKeeper spells it.
pub const OTHER_CLIENT_SUBJECT: &str = "/O=zklock-test/CN=zklock-other";
pub const OTHER_CLIENT_DN: &str = "CN=zklock-other,O=zklock-test";

/// A certificate, its key, and both concatenated (key first) as ZooKeeper's PEM key
/// store wants them.
#[derive(Clone, Debug)]
pub struct CertKey {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `key` then `cert` in one file, for `ssl.keyStore.location` with type PEM.
    pub bundle: PathBuf,
}

impl CertKey {
    pub fn cert_pem(&self) -> String {
        read(&self.cert)
    }

    pub fn key_pem(&self) -> String {
        read(&self.key)
    }
}

/// Every file of the test PKI. Paths stay valid for the life of the test process.
#[derive(Debug)]
pub struct Pki {
    dir: TempDir,
    /// The CA that signs the good server and client certificates (PEM).
    pub ca: PathBuf,
    /// A second CA nobody trusts, which signs [`Pki::unknown_ca_server`].
    pub other_ca: PathBuf,
    /// Server certificate with SAN `IP:127.0.0.1, DNS:localhost`, signed by `ca`.
    pub server: CertKey,
    /// Client certificate `CN=zklock-client,O=zklock-test`, signed by `ca`.
    pub client: CertKey,
    /// Signed by the test CA too, with [`OTHER_CLIENT_SUBJECT`].
    pub other_client: CertKey,
    /// Client certificate signed by `other_ca` (the server must refuse it).
    pub unknown_ca_client: CertKey,
    /// Server certificate with the right SAN but signed by `other_ca`.
    pub unknown_ca_server: CertKey,
    /// Server certificate signed by `ca` whose only SAN is `DNS:wrong.example`.
    pub wrong_name_server: CertKey,
    /// Server certificate signed by `ca`, right SAN, valid only 2020-01-01..2020-01-02.
    pub expired_server: CertKey,
}

impl Pki {
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn ca_pem(&self) -> String {
        read(&self.ca)
    }

    pub fn other_ca_pem(&self) -> String {
        read(&self.other_ca)
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The test PKI of this process, generated on first use (about a second).
pub fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(generate)
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run openssl ({e}): install it with `sudo apt-get install openssl`")
        });
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];

fn new_ca(dir: &Path, name: &str, subject: &str) -> PathBuf {
    let (key, cert) = (format!("{name}.key"), format!("{name}.pem"));
    let mut args = vec!["req", "-x509", "-nodes"];
    args.extend(EC);
    args.extend([
        "-keyout", &key, "-out", &cert, "-days", "3650", "-subj", subject,
    ]);
    // `req -x509` marks the certificate as a CA (basicConstraints CA:TRUE) by default.
    openssl(dir, &args);
    dir.join(cert)
}

/// A key and CSR, then a certificate signed by `ca` with the extensions in `ext`.
/// `dates`, if given, is `(notBefore, notAfter)` as `YYYYMMDDHHMMSSZ`, which needs
/// `openssl ca` (OpenSSL 3.0's `x509 -req` can only count days from now).
fn new_leaf(
    dir: &Path,
    name: &str,
    subject: &str,
    ca: &str,
    ext: &str,
    dates: Option<(&str, &str)>,
) -> CertKey {
    let (key, csr, cert, extfile) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    fs::write(dir.join(&extfile), ext).expect("write extensions");
    let mut args = vec!["req", "-nodes"];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
    openssl(dir, &args);
    let (ca_cert, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    match dates {
        None => openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-set_serial",
                &serial(),
                "-days",
                "3650",
                "-sha256",
                "-extfile",
                &extfile,
                "-out",
                &cert,
            ],
        ),
        Some((start, end)) => {
            let cadir = dir.join(format!("{name}-ca"));
            fs::create_dir_all(cadir.join("new")).expect("create openssl ca dir");
            fs::write(cadir.join("index.txt"), "").expect("write ca index");
            fs::write(cadir.join("serial"), format!("{}\n", serial())).expect("write serial");
            let config = format!(
                "[ca]\ndefault_ca = test\n\
                 [test]\ndatabase = {d}/index.txt\nnew_certs_dir = {d}/new\n\
                 serial = {d}/serial\ndefault_md = sha256\npolicy = any\n\
                 unique_subject = no\nemail_in_dn = no\n\
                 [any]\ncommonName = supplied\norganizationName = optional\n",
                d = cadir.display()
            );
            let cnf = format!("{name}-ca.cnf");
            fs::write(dir.join(&cnf), config).expect("write openssl ca config");
            openssl(
                dir,
                &[
                    "ca",
                    "-batch",
                    "-notext",
                    "-config",
                    &cnf,
                    "-cert",
                    &ca_cert,
                    "-keyfile",
                    &ca_key,
                    "-in",
                    &csr,
                    "-out",
                    &cert,
                    "-startdate",
                    start,
                    "-enddate",
                    end,
                    "-extfile",
                    &extfile,
                ],
            );
        }
    }
    let bundle = format!("{name}.bundle.pem");
    let joined = read(&dir.join(&key)) + &read(&dir.join(&cert));
    fs::write(dir.join(&bundle), joined).expect("write key store bundle");
    CertKey {
        cert: dir.join(cert),
        key: dir.join(key),
        bundle: dir.join(bundle),
    }
}

/// Distinct serials, so that no two certificates of one issuer share one.
fn serial() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0x1000);
    format!("{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

const SERVER_EXT: &str = "basicConstraints=CA:FALSE\n\
    keyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=serverAuth,clientAuth\n\
    subjectAltName=IP:127.0.0.1,DNS:localhost\n";
const WRONG_NAME_EXT: &str = "basicConstraints=CA:FALSE\n\
    keyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=serverAuth,clientAuth\n\
    subjectAltName=DNS:wrong.example\n";
const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\n\
    keyUsage=digitalSignature,keyEncipherment\n\
    extendedKeyUsage=clientAuth\n";

fn generate() -> Pki {
    let dir = TempDir::new();
    let d = dir.path();
    let ca = new_ca(d, "ca", "/CN=zklock test CA/O=zklock-test");
    let other_ca = new_ca(d, "other-ca", "/CN=unknown CA/O=elsewhere");
    let server = new_leaf(
        d,
        "server",
        "/CN=localhost/O=zklock-test",
        "ca",
        SERVER_EXT,
        None,
    );
    let client = new_leaf(d, "client", CLIENT_SUBJECT, "ca", CLIENT_EXT, None);
    let other_client = new_leaf(
        d,
        "other-client",
        OTHER_CLIENT_SUBJECT,
        "ca",
        CLIENT_EXT,
        None,
    );
    let unknown_ca_client = new_leaf(
        d,
        "unknown-ca-client",
        CLIENT_SUBJECT,
        "other-ca",
        CLIENT_EXT,
        None,
    );
    let unknown_ca_server = new_leaf(
        d,
        "unknown-ca-server",
        "/CN=localhost/O=elsewhere",
        "other-ca",
        SERVER_EXT,
        None,
    );
    let wrong_name_server = new_leaf(
        d,
        "wrong-name-server",
        "/CN=wrong.example/O=zklock-test",
        "ca",
        WRONG_NAME_EXT,
        None,
    );
    let expired_server = new_leaf(
        d,
        "expired-server",
        "/CN=localhost/O=zklock-test",
        "ca",
        SERVER_EXT,
        Some(("20200101000000Z", "20200102000000Z")),
    );
    Pki {
        dir,
        ca,
        other_ca,
        server,
        client,
        other_client,
        unknown_ca_client,
        unknown_ca_server,
        wrong_name_server,
        expired_server,
    }
}
