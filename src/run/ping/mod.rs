//! `--ping URL`: health-check pings in the healthchecks.io protocol
//! (docs/design.md, "Health-check pings"). The host that runs the command
//! sends `URL/start` as it starts it and `URL` (exit 0) or `URL/N` when it
//! ends; hosts that do not run it send nothing, or a plain `URL` with
//! `--ping-skipped` (but not after a failure: see [`finish`]). A ping never
//! changes the exit status nor delays the command or the lock: each is
//! bounded, sent from its own thread (the start ping) or after the lock is
//! released (the final one).

mod proxy;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;
use ureq::Proxy;
use ureq::http::Uri;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};

use super::metrics::Skip;
use crate::exit::{Exit, Failure};
use crate::report::Report;
use crate::values::Seconds;

/// The whole time one ping may take, retries included.
const BOUND: Duration = Duration::from_secs(10);
/// Retries after a connection error (never after an answer or a timeout).
const RETRIES: u32 = 2;
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// The pings of one run: one of its outputs, chosen once when it starts
/// (run::Outputs).
pub struct Pinger {
    url: String,
    skipped: bool,
    report: Report,
    started: Cell<bool>,
    start: RefCell<Option<JoinHandle<()>>>,
    failures: Arc<AtomicU32>,
}

impl Pinger {
    /// Checks URL (a usage error unless http:// or https://); None without
    /// one (`--ping` not given, or empty).
    pub fn new(url: Option<&str>, skipped: bool, report: &Report) -> Result<Option<Pinger>> {
        let Some(url) = url.filter(|url| !url.is_empty()) else {
            return Ok(None);
        };
        let valid = ["http://", "https://"].iter().any(|scheme| {
            url.strip_prefix(scheme)
                .is_some_and(|rest| !rest.is_empty())
        }) && url.parse::<Uri>().is_ok();
        if !valid {
            // Not echoed: it may be a credential with a typo.
            return Err(Failure::usage("--ping needs an http:// or https:// URL"));
        }
        Ok(Some(Pinger {
            url: url.to_owned(),
            skipped,
            report: report.clone(),
            started: Cell::new(false),
            start: RefCell::new(None),
            failures: Arc::new(AtomicU32::new(0)),
        }))
    }

    /// The command has started: `URL/start`, sent concurrently.
    pub fn started(&self) {
        self.started.set(true);
        let url = with_suffix(&self.url, "/start");
        let (report, failures) = (self.report.clone(), Arc::clone(&self.failures));
        let thread = std::thread::Builder::new()
            .name("zklock-ping".into())
            .spawn(move || send(&url, &report, &failures));
        match thread {
            Ok(thread) => *self.start.borrow_mut() = Some(thread),
            Err(err) => fail(&self.report, &self.failures, &self.url, &err.to_string()),
        }
    }

    /// Sends the final ping of a finished run (after the lock is
    /// released), once the start ping is done; `ran` is whether this host
    /// ran the command, `skip` why it did not though it held the lock.
    /// Returns the failed pings.
    ///
    /// A host that skips because the last run failed (within
    /// `--retry-after`) sends nothing, even with `--ping-skipped`: a
    /// success would turn the check green right after the failure it
    /// reports, and the failure is the failing host's to report, once.
    pub fn finish(&self, result: &Result<Exit>, ran: bool, skip: Option<Skip>) -> u32 {
        if let Some(start) = self.start.borrow_mut().take() {
            let _ = start.join();
        }
        let ran = ran || self.started.get();
        let suffix = match result {
            Ok(Exit::Command(0)) if ran => Some(String::new()),
            Ok(exit) if ran => Some(format!("/{}", exit.code())),
            Err(err) if ran => Some(format!("/{}", Exit::for_error(err).code())),
            // Another host holds the lock, or ran the job successfully recently.
            Ok(Exit::Conflict(_)) if self.skipped && skip != Some(Skip::Failed) => {
                Some(String::new())
            }
            // Errors before the command ran are not this check's to report:
            // another host may well run the job.
            _ => None,
        };
        if let Some(suffix) = suffix {
            send(
                &with_suffix(&self.url, &suffix),
                &self.report,
                &self.failures,
            );
        }
        self.failures.load(Ordering::Relaxed)
    }
}

/// One ping, within BOUND; a failure is one line (hidden by `-q`).
fn send(url: &str, report: &Report, failures: &AtomicU32) {
    let deadline = Instant::now() + BOUND;
    let mut attempt = 0;
    let failure = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let error = match get(url, left) {
            Ok(()) => return,
            Err(err) => err,
        };
        let retry = attempt < RETRIES
            && left > RETRY_PAUSE
            && match &error {
                ureq::Error::Io(err) => err.kind() != std::io::ErrorKind::TimedOut,
                ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
                _ => false,
            };
        if !retry {
            break error;
        }
        attempt += 1;
        std::thread::sleep(RETRY_PAUSE);
    };
    let reason = match failure {
        ureq::Error::StatusCode(code) => format!("HTTP status {code}"),
        // ureq says only `timeout: global`: the bound is all of a ping's time.
        ureq::Error::Timeout(_) => format!("no answer within {}", Seconds(BOUND)),
        ureq::Error::Io(err) if err.kind() == std::io::ErrorKind::TimedOut => {
            format!("no answer within {}", Seconds(BOUND))
        }
        other => other.to_string().replace(url, &shown(url)),
    };
    fail(report, failures, url, &reason);
}

/// URL with `suffix` (`/start`, `/N` or nothing) at the end of its path,
/// before any query (`.../slug/start?create=1`, as healthchecks.io takes
/// it); a fragment is never sent.
fn with_suffix(url: &str, suffix: &str) -> String {
    let url = url.split('#').next().unwrap_or_default();
    let (path, query) = match url.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (url, None),
    };
    let mut with = format!("{}{suffix}", path.trim_end_matches('/'));
    if let Some(query) = query {
        with.push('?');
        with.push_str(query);
    }
    with
}

/// One GET of `url` within `timeout`; an HTTP status other than 2xx is an
/// error.
fn get(url: &str, timeout: Duration) -> Result<(), ureq::Error> {
    let uri: Uri = (url.parse()).map_err(|_| ureq::Error::BadUri(shown(url)))?;
    match Proxy::try_from_env().filter(|proxy| proxy::forwards(proxy, &uri)) {
        Some(proxy) => proxy::get_through(&proxy, &uri, timeout),
        None => agent(timeout).get(uri).call().map(drop),
    }
}

fn fail(report: &Report, failures: &AtomicU32, url: &str, reason: &str) {
    failures.fetch_add(1, Ordering::Relaxed);
    report.note(format_args!("ping to {} failed: {reason}", shown(url)));
}

/// Blocking, verifying against the system's CA store (which honours
/// SSL_CERT_FILE and SSL_CERT_DIR) with the rustls and aws-lc-rs that the
/// ZooKeeper client already brings.
fn agent(timeout: Duration) -> ureq::Agent {
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::PlatformVerifier)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(true)
        .timeout_global(Some(timeout))
        .build()
        .new_agent()
}

/// The URL as it may be printed: scheme and host only, as the rest (and
/// any user info) is the credential.
fn shown(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{scheme}://{host}/...")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suffix_goes_on_the_path_before_the_query() {
        for (url, suffix, sent) in [
            (
                "https://hc-ping.com/KEY/slug?create=1",
                "/start",
                "https://hc-ping.com/KEY/slug/start?create=1",
            ),
            (
                "https://hc/KEY/slug?create=1",
                "/2",
                "https://hc/KEY/slug/2?create=1",
            ),
            (
                "https://hc/KEY/slug?create=1",
                "",
                "https://hc/KEY/slug?create=1",
            ),
            ("https://hc/uuid/", "/start", "https://hc/uuid/start"),
            ("https://hc/uuid", "", "https://hc/uuid"),
            ("https://hc/uuid#x/y?z", "/1", "https://hc/uuid/1"),
            ("https://hc/u?a=1#frag", "/start", "https://hc/u/start?a=1"),
            (
                "http://user:pw@hc:8000/u/?a",
                "/3",
                "http://user:pw@hc:8000/u/3?a",
            ),
        ] {
            assert_eq!(with_suffix(url, suffix), sent, "{url} {suffix}");
        }
    }

    #[test]
    fn only_the_scheme_and_host_are_shown() {
        assert_eq!(
            shown("https://hc.example.net/ping/0f7a-uuid"),
            "https://hc.example.net/..."
        );
        assert_eq!(
            shown("http://user:secret@hc:8000/p?x=1"),
            "http://hc:8000/..."
        );
        assert_eq!(
            shown("https://hc.example.net"),
            "https://hc.example.net/..."
        );
    }
}
